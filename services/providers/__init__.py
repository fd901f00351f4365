"""Provider adapters, shared by the dispatcher (apply an operation) and the pull reconciler
(look it up by key, list the provider's effects): `interface.py` is what every adapter
does, `registry.py` finds one by name (the `recon.providers` entry points), `adapters.py`
is the sandbox's and `stripe/` Stripe's; `classify.py` (pure) is the sandbox's rule of what
an answer means and the part of it every adapter shares.

Never imports a process's package (the dispatcher, the reconciler, the intake).
"""
