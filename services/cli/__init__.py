"""Operator commands (`python -m services.cli --help`)."""
