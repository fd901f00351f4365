"""Providers declared as data (issue 20, item 3; README "Connecting a provider"): a TOML
file describes an HTTP API (its requests, what its answers mean, how it is asked about a
key, how its effects are listed) and the `declared` adapter speaks it, with no Python.

model: the file's shape; locate: loading it, every mistake named by file and line;
fields: JSON pointers into payloads and answers; requests: the HTTP request of an apply;
answers: what an answer means; lookups: the `query` strategy's request and reading;
effects: the drift listing; adapter: DeclaredAdapter.
"""
