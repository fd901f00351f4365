"""The published contract, generated from the code: docs/openapi.json and docs/asyncapi.json
(`python -m services.contract.schemas --write`). Deployed code: unlike services.devtools, a
running intake may serve these documents."""
