"""The errors aksgpu's domain raises and the exit codes of every aksgpu command (docs: "Exit codes").

A `Problem` is one problem with what the user wrote: where (path), what (value), which rule it
breaks, how to fix it, its severity and, where known, its source (the stack file key or file it came
from). It is the one problem type of every layer: the spec's rules yield them (aksgpu.spec.Issue is
this class), SpecError carries a spec's problems, and UserError can carry them too. A UserError with
a message only (`UserError("...")`) stays what it was: a problem that is not about one field.
The command line prints them in one place (aksgpu/cli/console.py). Imports nothing of aksgpu.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

EXIT_FAILED = 1  # the spec has errors, a check found drift, or an operation failed
EXIT_USAGE = 2  # bad input or a missing prerequisite
EXIT_CHANGES = 3  # `preview --expect-no-changes` found changes
EXIT_INTERNAL_ERROR = 70  # an error aksgpu did not foresee: a bug (BSD's EX_SOFTWARE)
EXIT_INTERRUPTED = 130  # Ctrl-C
EXIT_BROKEN_PIPE = 141  # the reader of the output went away (128 + SIGPIPE, as a shell reports it)

Severity = Literal["error", "warning"]
# Line breaks (\n, \r, U+0085, U+2028, U+2029) and other control characters.
_LINE_BREAKING = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def one_line(text: str) -> str:
    """`text` with line breaks and control characters as \\uXXXX escapes: it stays one line (of
    a message, or of a YAML comment, which a line break would end early)."""
    return _LINE_BREAKING.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


class _Missing:
    def __repr__(self) -> str:
        return "(not set)"


MISSING = _Missing()  # a Problem's value for a field the user left out


def is_missing(value: Any) -> bool:
    """Whether a problem's value stands for a field the user leaves out."""
    return value is MISSING


def render_value(value: Any) -> str:
    """A short, JSON-like rendering of a user's value for messages."""
    if value is MISSING:
        return "(not set)"
    try:
        text = json.dumps(value, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    except RecursionError:
        text = "(a value nested too deeply to show)"
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass(frozen=True)
class Problem:
    """One problem in what the user wrote: where, what, which rule, and how to fix it."""

    path: str
    value: Any
    rule: str
    fix: str
    severity: Severity = "error"
    source: str | None = None  # where it was written ("aksgpu:cluster in Pulumi.dev.yaml"), when known

    def __str__(self) -> str:
        # A path holds the user's keys, which may hold line breaks: escaped, one problem stays one line.
        return f"{one_line(self.path)} = {render_value(self.value)}: {self.rule}. Fix: {self.fix}"


def render_problems(source: str, problems: Sequence[Problem]) -> str:
    """The errors among `problems` as every command prints them: the source and their count, then
    one line each."""
    errors = [problem for problem in problems if problem.severity == "error"]
    noun = "problem" if len(errors) == 1 else "problems"
    return "\n".join([f"{source} has {len(errors)} {noun}:", *(f"  - {problem}" for problem in errors)])


def _problems_message(problems: Sequence[Problem], source: str | None) -> str:
    """A UserError's message from its problems: one problem on one line, with where it was set;
    several as every command lists a spec's (render_problems)."""
    if len(problems) != 1:
        return render_problems(source or "the input", problems) if problems else ""
    [problem] = problems
    where = f" ({one_line(problem.source)})" if problem.source else ""
    end = "" if problem.fix.endswith((".", "?", "!")) else "."
    return (f"{one_line(problem.path)} = {render_value(problem.value)}{where}: {problem.rule}. "
            f"Fix: {problem.fix}{end}")


class UserError(Exception):
    """A problem with the user's input or environment: printed as one message, no traceback.

    The domain's one error type. `UserError(message)` for a problem that is not about one field
    (a missing file, a name already taken: the message says what, the rule and the fix);
    `problems` (and their `source`) for those that are, in which case the message, when not
    given, is their rendering. SpecError (aksgpu.spec) is the kind whose problems are a spec's.
    `exit_code` is the code a command exits with; `text()` and `document()` are how the command
    line prints it (aksgpu/cli/console.py), as a line on stderr or, under --json, on stdout."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str = "", problems: Sequence[Problem] = (), source: str | None = None) -> None:
        self.problems = list(problems)
        self.source = source
        super().__init__(message or _problems_message(self.problems, source))

    def text(self) -> str:
        """The error as a command prints it on stderr."""
        return f"error: {self}"

    def document(self) -> dict[str, Any]:
        """The error as a command prints it under --json: a JSON document on stdout."""
        return error_document(str(self), self.exit_code, self.problems, self.source)


def problem_document(problem: Problem) -> dict[str, Any]:
    """One problem as JSON: its fields, the value as the user wrote it (null when not set)."""
    value = None if is_missing(problem.value) else problem.value
    try:
        json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        value = render_value(problem.value)
    return {"path": problem.path, "value": value, "set": not is_missing(problem.value), "rule": problem.rule,
            "fix": problem.fix, "severity": problem.severity, "source": problem.source}


def error_document(message: str, exit_code: int, problems: Sequence[Problem] = (),
                   source: str | None = None) -> dict[str, Any]:
    """The JSON document a command prints on stdout when it fails under --json (docs: "Exit codes")."""
    return {"error": {"message": message, "exitCode": exit_code, "source": source,
                      "problems": [problem_document(problem) for problem in problems]}}
