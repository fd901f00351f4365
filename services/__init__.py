"""The processes of recon, one package each (intake, decider, dispatcher, projector, saga,
reconciler, cli), and what they share: settings (config.py), the process entry
(lifecycle.run_process), Kafka clients and topics, the at-least-once consumer policy and
the test-only crash points.

A process imports the library folders (events, projections, reconcilers) and the shared
modules here, never another process's package. The MCP server (mcp/) is a client of the
intake, not a process of recon: its tools' schemas are the intake's request models.
"""

from services import kafka_mends

# Every recon process, one-off and test imports this package before its first Kafka
# client: aiokafka is mended here once for all of them (kafka_mends says why at import).
kafka_mends.install()
