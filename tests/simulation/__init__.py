"""A deterministic simulator of recon's protocol (issue 10, item 3).

The real pure cores (the decider's `handle`, the finished markers, the saga's `react`,
the dispatcher's classification, projection check and call plan, the pull planner, the
webhook intake, the projection fold) wired to simulated Kafka, a modelled `calls_begun`
table, a simulated provider with every sandbox fault, a simulated clock and crashes with
state restore, all driven by one seed.
The invariants are checked after every step (tests.simulation.invariants).

A test tool: production code never imports it.
"""
