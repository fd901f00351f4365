"""The projector process: recon.events and recon.drift into Postgres, exactly once
(`runtime.py`; what it writes is projections/). Imports projections and events, never
another process's package."""
