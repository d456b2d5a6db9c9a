"""`aksgpu --help` without Typer or any command module: the top-level help text from a table of the
group's help, options and commands (each command's first help paragraph, in the app's order),
laid out as click lays it out (its HelpFormatter and make_default_short_help, click 8.x
src/click/formatting.py and src/click/utils.py, as vendored in typer._click; checked 2026-11-27).

The table is short_help_table.py, a derived file that tools/regenerate.py writes from the Typer app
(`tools/regenerate.py --check` fails while it is stale). tests/test_cli_short_help.py holds it to the
real app: the same help, options and commands, and the same text at several terminal widths. Only
the standard library is imported here.
"""

from __future__ import annotations

import shutil
import textwrap

from aksgpu.cli.short_help_table import COMMANDS, GROUP_HELP, OPTIONS, USAGE


def short_help(text: str, max_length: int) -> str:
    """click's make_default_short_help for a one-paragraph help: whole, cut at its first sentence,
    or cut at a word with "..."."""
    words = text.split()
    total_length = 0
    for i, word in enumerate(words):
        total_length += len(word) + (i > 0)
        if total_length > max_length:
            break
        if word[-1] == ".":
            return " ".join(words[: i + 1])
        if total_length == max_length and i != len(words) - 1:
            break
    else:
        return " ".join(words)
    total_length += len("...")
    while i > 0:
        total_length -= len(words[i]) + (i > 0)
        if total_length <= max_length:
            break
        i -= 1
    return " ".join(words[:i]) + "..."


def _wrap(text: str, width: int, indent: str = "") -> str:
    return textwrap.TextWrapper(width, initial_indent=indent, subsequent_indent=indent,
                                replace_whitespace=False).fill(text)


def _definitions(rows: list[tuple[str, str]], width: int, indent: int = 2) -> list[str]:
    """click's HelpFormatter.write_dl (col_max 30, col_spacing 2) inside one section."""
    first_col = min(max(len(term) for term, _ in rows), 30) + 2
    lines = []
    for term, text in rows:
        head = " " * indent + term
        if len(term) <= first_col - 2:
            head += " " * (first_col - len(term))
        else:
            lines.append(head)
            head = " " * (first_col + indent)
        wrapped = _wrap(text, max(width - first_col - 2, 10)).splitlines()
        lines.append(head + wrapped[0])
        lines.extend(" " * (first_col + indent) + line for line in wrapped[1:])
    return lines


def help_text(columns: int | None = None) -> str:
    """What `aksgpu --help` prints, without its final newline, for a terminal this wide."""
    width = max(min(columns or shutil.get_terminal_size().columns, 80) - 2, 50)
    lines = [f"Usage: aksgpu {USAGE}", "", _wrap(GROUP_HELP, width, "  "), "", "Options:"]
    lines += _definitions(list(OPTIONS), width)
    limit = width - 6 - max(len(name) for name, _ in COMMANDS)
    lines += ["", "Commands:"]
    lines += _definitions([(name, short_help(text, limit)) for name, text in COMMANDS], width)
    return "\n".join(lines)
