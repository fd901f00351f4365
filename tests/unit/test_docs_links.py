"""The README and docs/ hold up in a clone of the repository alone (issue 19, item 6): every
link lands on a file (and heading) inside it, every path, module, make target and test they
name exists, nothing points outside (the team's `../shared/` is not the user's), and the
README links every page of docs/."""

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^```.*?^```", re.M | re.S)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
LINK_TARGET = re.compile(r"\]\([^)\s]+\)")
INLINE_CODE = re.compile(r"`([^`]+)`")
# The repository's own folders; a path starting with one of them is a claim about a file.
TOP = sorted(
    [p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")] + [".ci"]
)
PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(map(re.escape, TOP)) + r")/[\w./-]*)")
MODULE = re.compile(r"python -m ([\w.]+)")
MAKE = re.compile(r"^make\s+([\w-]+)")
TEST_NAME = re.compile(r"^test_\w+$")
TEST_FILE = re.compile(r"^test_\w+\.py$")


def _text(page: Path) -> str:
    return page.read_text(encoding="utf-8")


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    for line in FENCE.sub("", _text(page)).splitlines():
        if match := re.match(r"#{1,6} (.+)", line):
            slug = _slug(match.group(1))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _links(page: Path) -> Iterator[str]:
    # Code blocks hold commands, not links.
    yield from LINK.findall(FENCE.sub("", _text(page)))


def _relative_links(page: Path) -> Iterator[str]:
    for target in _links(page):
        if not re.match(r"[a-z]+:", target):
            yield target


def _code(page: Path) -> Iterator[str]:
    """Every inline code span and every line of every code block."""
    text = _text(page)
    for block in FENCE.findall(text):
        yield from block.splitlines()[1:-1]
    yield from INLINE_CODE.findall(FENCE.sub("", text))


def _problems(page: Path) -> Iterator[str]:
    for target in _relative_links(page):
        file_part, _, anchor = target.partition("#")
        resolved = (page.parent / file_part).resolve() if file_part else page
        if not resolved.is_relative_to(ROOT):
            yield f"link {target!r} leaves the repository"
        elif not resolved.exists():
            yield f"link {target!r}: no such file"
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            yield f"link {target!r}: no heading #{anchor} in {resolved.name}"
    # Paths are written from the repository's root. In prose only a file name counts: the
    # `events/s` of a rate is not a path. A link's target is relative to its page and was
    # checked above: docs/'s link to examples/acme.toml is not the root's examples/ folder.
    prose = LINK_TARGET.sub("]", INLINE_CODE.sub("", FENCE.sub("", _text(page))))
    named = [*PATH.findall("\n".join(_code(page)))]
    named += [path for path in PATH.findall(prose) if Path(path.rstrip(".,:;")).suffix]
    for path in named:
        path = path.rstrip(".,:;")
        if not (ROOT / path).exists():
            yield f"path {path!r}: no such file or folder"
    for code in _code(page):
        code = code.strip()
        for module in MODULE.findall(code):
            if module.split(".")[0] in TOP:
                base = ROOT.joinpath(*module.split("."))
                if not (base.with_suffix(".py").exists() or (base / "__main__.py").exists()):
                    yield f"module {module!r}: no such module"
        if (make := MAKE.match(code)) and make.group(1) not in _make_targets():
            yield f"`make {make.group(1)}`: no such target in the Makefile"
        if TEST_NAME.match(code) and code not in _test_functions():
            yield f"test {code!r}: no test of that name under tests/"
        if TEST_FILE.match(code) and not any((ROOT / "tests").rglob(code)):
            yield f"test file {code!r}: not under tests/"


def _make_targets() -> set[str]:
    return set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))


def _test_functions() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        names.update(re.findall(r"^\s*(?:async )?def (test_\w+)", path.read_text(), re.M))
    return names


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_every_link_path_command_and_test_named_exists_in_the_repository(page: Path) -> None:
    assert list(_problems(page)) == []


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_nothing_points_outside_the_repository(page: Path) -> None:
    # Links are checked by resolving them; this catches a path written as text.
    prose = LINK.sub("", _text(page))
    # `../`, not the `.../` of an elided id (`rv_.../resolve`).
    assert re.findall(r"(?<![.\w])\.\./\S*", prose) == []
    assert "/work/" not in prose


def test_the_readme_links_every_page_of_docs() -> None:
    readme = ROOT / "README.md"
    linked = {(readme.parent / t.partition("#")[0]).resolve() for t in _relative_links(readme)}
    pages = {p.resolve() for p in (ROOT / "docs").iterdir() if p.is_file()}
    assert sorted(p.name for p in pages - linked) == []


def test_the_checks_see_what_they_check() -> None:
    # A guard on the guard: the patterns find the README's own links, paths and commands.
    readme = ROOT / "README.md"
    assert "docs/design.md#promises" in set(_links(readme))
    assert "docs/contract.md" in PATH.findall(_text(readme))
    assert "make test" in [c.strip() for c in _code(readme)]
    assert _slug("Sandbox provider (default `http://127.0.0.1:8090`)") == (
        "sandbox-provider-default-http1270018090"
    )
