"""The docs site's pages (docs/), for the tests that hold a page's text to the code: a page by
name, and one section of it by its heading."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"
_HEADING = re.compile(r"^(#{1,6}) (.*)$")


def docs_page(name: str) -> str:
    """The Markdown of docs/<name> (e.g. "guides/fleets.md")."""
    return (DOCS / name).read_text(encoding="utf-8")


def section(text: str, heading: str) -> str:
    """The section of `text` whose heading starts with `heading` (any level, code blocks skipped):
    from its heading line to the next heading of the same or a higher level, or the end."""
    lines = text.splitlines(keepends=True)
    fence = False
    start = level = None
    for number, line in enumerate(lines):
        if line.startswith("```"):
            fence = not fence
            continue
        match = None if fence else _HEADING.match(line.rstrip("\n"))
        if match is None:
            continue
        if start is None:
            if match.group(2).startswith(heading):
                start, level = number, len(match.group(1))
        elif len(match.group(1)) <= level:
            return "".join(lines[start:number])
    assert start is not None, f"no section {heading!r}"
    return "".join(lines[start:])
