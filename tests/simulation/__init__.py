"""A deterministic simulator of recon's protocol (issue 10, item 3).

The real pure cores (the decider's `handle`, the finished markers and its take-over rule,
the saga's `react`, the call plan and its classification, the pull planner, the webhook
intake, the projection fold, the group commit's timing) wired to simulated Kafka, the
decider's staged, pipelined transactions (.decider), its calls after their commit, a modelled
`calls_begun` table, a simulated provider with every sandbox fault, a
simulated clock and crashes with state restore, all driven by one seed.
The invariants are checked after every step (tests.simulation.invariants).

A test tool: production code never imports it.
"""
