"""Who holds the lease of a call a test begins itself (services.dispatcher.calls_begun.Call:
every begin takes one): a process that died, whose lease has lapsed by the time the test's
dispatcher looks, so that dispatcher claims the call at once, as a take-over does after a
crash once the dead holder's lease ran out. A test about the wait itself sets its own."""

DEAD_HOLDER = "a-test-process-that-died"
LAPSED_S = 0.001
