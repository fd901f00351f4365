"""Every console template is rendered with autoescape, and none opts out: payloads,
evidence, reasons and notes are attacker-controlled (issue 21). The browser tests show it
for the pages they visit; this covers every template, including ones they do not."""

import re

from services.intake.console.render import HERE, templates

OPT_OUTS = re.compile(r"\|\s*safe\b|autoescape\s+false|Markup\(|\{%\s*raw", re.I)


def test_the_environment_escapes() -> None:
    assert templates().autoescape is True
    rendered = templates().from_string("{{ x }}").render(x="<script>alert(1)</script>")
    assert rendered == "&lt;script&gt;alert(1)&lt;/script&gt;"


def test_no_template_opts_out_of_escaping() -> None:
    templates = sorted((HERE / "templates").glob("*"))
    assert templates, "the console's templates are found"
    for template in templates:
        assert template.suffix == ".html", template.name
        assert not OPT_OUTS.search(template.read_text()), template.name
