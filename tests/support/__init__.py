"""Helpers shared by the test layers, imported as `support.<module>`: the stack fixtures
and the API client (`stack_fixtures.py`, `recon_client.py`), event and command builders
(`txbuilders.py`), readers of topics and of the event log, and the helpers of the crash,
decider, compensation and pull-reconciler tests.

They may import anything recon has; no recon code imports them, and they import no test
module.
"""
