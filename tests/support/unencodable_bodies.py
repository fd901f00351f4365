"""JSON bodies from outside recon (a webhook, a provider's answer) whose reading must escape
a lone surrogate or a NUL: each one a way past a check that spares the walk over the strings
(events.safe_json.escaped_of)."""

UNENCODABLE_BODIES = [
    b'{"type": "t", "k\\u0000": "\\ud800"}',  # escapes, in a name and a value
    b'{"type": "t", "v": "\xed\xa0\x80"}',  # a surrogate's own UTF-8 bytes
    '{"type": "t", "v": "\\ud800"}'.encode("utf-16"),  # another encoding
    '{"type": "t", "v": "\\ud800"}'.encode("utf-32-le"),  # NUL bytes, no BOM
]
