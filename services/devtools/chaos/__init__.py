"""`make chaos`: transactions through the real stack while a seeded nemesis breaks it.

A dev tool, not a recon service. One job per module:
    history.py   what a run collected (plain data)
    checks.py    the verdict: pure functions over a history
    workload.py  the mixed transactions the run submits
    nemesis.py   the seeded plan of faults and the code that carries it out
    collect.py   reading the history back: the event log, drift, the provider, the audit
    run.py       one run: start, drive, break, heal, wait for quiescence, collect, judge
    __main__.py  `python -m services.devtools.chaos`
"""
