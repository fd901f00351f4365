"""The saga orchestrator: turns failure events into ordered compensation commands."""
