"""Postgres views built from recon.events: what people and the API query.

`schema.sql` (applied by `schema.py`), the pure view reducer (`view.py`), what a record
holds (`decode.py`, pure), the batch writer (`writer.py`) and where it stands
(`offsets.py`). The process that runs them, reading Kafka, is services/projector/.
Imports events only; never services, never Kafka.
"""
