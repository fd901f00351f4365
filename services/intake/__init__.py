"""The intake API: where agents hand recon their intents (docs/contract.md, "Intake API").

app.py wires it; one module per group of routes (transactions, abort, reviews, drift,
webhooks, health), none holding SQL; tenant_store.py holds every query the routes ask of
a tenant's rows, webhook_store.py the webhook ingress's; intents.py, resolutions.py and
abort_record.py are the guards (stores too) written before a command is produced;
submission.py is pure. Imports events, projections (the schema), reconcilers (webhook
checks) and the shared plumbing; never another process.
"""
