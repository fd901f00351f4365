"""The intake API: where agents hand recon their intents (docs/contract.md, "Intake API").

app.py wires it; one module per group of routes (transactions, abort, reviews, drift,
webhooks, health); queries.py holds what the routes read; intents.py and resolutions.py
are the guards written before a command is produced; submission.py is pure. Imports
events, projections (the schema), reconcilers (webhook checks) and the shared plumbing;
never another process.
"""
