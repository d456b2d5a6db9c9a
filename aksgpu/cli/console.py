"""What every command prints the same way: one-line errors with their exit code, status lines on
stderr (stdout carries only data), JSON, and a spinner when a person is watching.

Only typer and the standard library are imported at module level (rich only when a line is
printed), so importing this costs `aksgpu --help` nothing.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

import typer

from aksgpu.errors import EXIT_FAILED, EXIT_USAGE, Problem, UserError, error_document


class _Failure:
    """What the command line knows of the command that runs: whether it prints JSON (--json) and
    the error it failed with, so a failure under --json still prints a document on stdout."""

    json_output = False
    error: UserError | None = None
    message: str | None = None


FAILURE = _Failure()


class _Output:
    """How the command line prints: --quiet leaves out status lines and spinners (errors still
    print). Colour follows NO_COLOR (https://no-color.org), which rich's Console reads itself."""

    quiet = False


OUTPUT = _Output()


def fail(error: str | UserError, code: int | None = None) -> NoReturn:
    """The error on stderr (`error: message`, or a spec's problems one per line), then exit with
    `code`: the error's own exit code (2, bad input; 1, a spec with errors) unless said otherwise.
    Under --json the command line also prints the error as a JSON document on stdout (cli/app.py)."""
    if isinstance(error, str):
        FAILURE.message = error
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(EXIT_USAGE if code is None else code)
    FAILURE.error = error
    typer.echo(error.text(), err=True)
    raise typer.Exit(error.exit_code if code is None else code)


def show_problems(error: UserError) -> None:
    """A spec's problems (aksgpu.errors.Problem, carried by SpecError) on stderr, as every command
    prints them: their source and count, then one line each (aksgpu.errors.render_problems)."""
    FAILURE.error = error
    typer.echo(str(error), err=True)


def fail_input(path: str, value: Any, rule: str, fix: str) -> NoReturn:
    """Exit 2 on one bad argument or option (`path`: as the help names it, e.g. "--only" or "RULE
    argument"): printed, and under --json documented, as a Problem like every other input error."""
    fail(UserError(problems=[Problem(path, value, rule, fix)]))


def fail_problems(error: UserError, code: int = EXIT_FAILED) -> NoReturn:
    """show_problems, then exit with `code` (1, the spec has errors, unless said otherwise)."""
    show_problems(error)
    raise typer.Exit(code)


def failure_document(code: int) -> dict[str, Any]:
    """The JSON document of a command that exits with `code`: its error's, or one that says where
    the reason went (stderr) when the command ended without one."""
    if FAILURE.error is not None:
        document = FAILURE.error.document()
        document["error"]["exitCode"] = code
        return document
    message = FAILURE.message or "the command failed; the reason is on stderr"
    return error_document(message, code)


def say(message: str, style: str | None = None) -> None:
    """A status line on stderr, so stdout carries only engine output or data; none under --quiet."""
    if OUTPUT.quiet:
        return
    from rich.console import Console
    from rich.text import Text

    Console(stderr=True, highlight=False, soft_wrap=True).print(Text(message, style=style or ""))


def echo_json(document: Any) -> None:
    typer.echo(json.dumps(document, indent=2, default=str))


@contextlib.contextmanager
def progress(message: str) -> Iterator[Callable[[int, int], None] | None]:
    """A spinner on stderr for a long step, only when a person is watching (a terminal). It gives
    a function that shows how far the step is (`done`, `total`: "message (3 of 21 stacks planned)"),
    or None when nothing is shown (not a terminal, --quiet)."""
    if OUTPUT.quiet or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console

    with Console(stderr=True).status(message) as status:
        yield lambda done, total: status.update(f"{message} ({done} of {total} stacks planned)")


def table_width() -> int | None:
    """Rich's width for tables: the terminal's, or wide enough for paths and values when not on a
    terminal (pipes, tests, CI logs)."""
    return None if sys.stdout.isatty() else 160


def show_value(value: Any) -> str:
    """A spec value in a table cell: strings as they are, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value)
