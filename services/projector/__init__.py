"""The projector process: recon.events -> Postgres views (see projections.projector)."""
