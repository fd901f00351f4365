"""The intake API: where agents hand recon their intents (CONTRACT.md, "Intake API")."""
