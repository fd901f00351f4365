"""Postgres views built from recon.events: what people and the API query.

The pure view reducer (`view.py`), what a record holds (`decode.py`, pure), the batch
writer (`writer.py`) and where it stands (`offsets.py`); the tables they write are
services/migrations'. The process that runs them, reading Kafka, is services/projector/.
Imports events only; never services, never Kafka.
"""
