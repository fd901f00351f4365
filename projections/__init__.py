"""Postgres views built from recon.events: what people and the API query.

The pure view reducer (`view.py`), what a record holds (`decode.py`, pure), the batch
writer (`writer.py`) and where it stands (`offsets.py`); the tables they write are
services/migrations'. The process that runs them, reading Kafka, is services/projector/.
Also `held_open.py`: the bound on a Postgres transaction held open across another system's
round trip, here because this is the lowest folder of Postgres code that reconcilers/ and
services/ both import, so the rule has one copy.
Imports events only; never services, never Kafka.
"""
