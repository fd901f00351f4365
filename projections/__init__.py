"""Postgres views built from recon.events: what people and the API query."""
