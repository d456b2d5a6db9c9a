"""The console script loads only the module of the command it runs (cli/app.py CONCERNS, issue 28):
the table must name each module's commands, and a command line gets the app it would get with
every command (the same output and exit code)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import typer.main
from aksgpu.cli.app import CONCERNS, _concern_of, app, app_with

from tests.helpers import EXAMPLE


def _commands(group: typer.Typer) -> list[str]:
    command = typer.main.get_command(group)
    return list(command.list_commands(command.make_context("aksgpu", [], resilient_parsing=True)))  # type: ignore[attr-defined]


@pytest.mark.parametrize("concern", list(CONCERNS))
def test_each_concern_adds_the_commands_the_table_names(concern: str) -> None:
    assert _commands(app_with([concern])) == list(CONCERNS[concern])


def test_the_table_is_every_command() -> None:
    assert sorted(_commands(app)) == sorted(name for names in CONCERNS.values() for name in names)


@pytest.mark.parametrize(("args", "concern"), [
    (["validate", "--spec-only"], "environments"),
    (["-q", "render", "--check"], "environments"),
    (["--quiet", "ci", "summary"], "ci"),
    (["vm-sizes"], "preflight"),
    (["policy", "list"], "policy"),
    ([], None),
    (["--help", "validate"], None),  # the group's own help lists every command
    (["-qh", "validate"], None),
    (["--version", "plan"], None),
    (["validat"], None),  # no such command: the group's message, with every command to suggest
    (["--", "validate"], None),
])
def test_the_concern_of_a_command_line(args: list[str], concern: str | None) -> None:
    assert _concern_of(args) == concern


def test_completion_reads_the_whole_app(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("_AKSGPU_COMPLETE", "complete_bash")
    assert _concern_of(["validate"]) is None


def test_the_console_script_imports_only_the_running_commands_module() -> None:
    code = ("import sys; sys.argv = ['aksgpu', 'render', '--check']; from aksgpu.cli.entry import main\n"
            "try:\n    main()\nexcept SystemExit as end:\n    code = end.code\n"
            "print(code, sorted(m for m in sys.modules if m.startswith('aksgpu.cli.') and m.endswith('commands')))")
    result = subprocess.run([sys.executable, "-c", code], cwd=EXAMPLE, capture_output=True, text=True, check=True)
    assert result.stdout.splitlines()[-1] == "0 ['aksgpu.cli.environments.commands']"


@pytest.mark.parametrize("args", [["validate", "--spec-only"], ["render", "--check"], ["policy", "show", "nope"],
                                  ["vm-sizes", "--bogus"], ["validate", "--json", "nope"]])
def test_a_command_line_prints_what_the_whole_app_prints(args: list[str]) -> None:
    """The console script's app (one concern's commands) against the app with every command."""
    def run(code: str) -> tuple[int, str, str]:
        result = subprocess.run([sys.executable, "-c", code, *args], cwd=EXAMPLE, capture_output=True, text=True,
                                env={"COLUMNS": "100", "PATH": ""})
        return result.returncode, result.stdout, result.stderr

    lazy = run("import sys; sys.argv[0] = 'aksgpu'; from aksgpu.cli.app import main; main()")
    full = run("import sys; sys.argv[0] = 'aksgpu'; from aksgpu.cli import app; app._concern_of = lambda args: None; "
               "app.main()")
    assert lazy == full


@pytest.mark.parametrize(("args", "collecting"), [(["render", "--check"], False), (["policy", "list"], True)])
def test_the_collector_is_paused_for_the_short_offline_commands(args: list[str], collecting: bool) -> None:
    """The environments commands run with the collector paused (its passes over what they allocate
    cost about a tenth of `validate --spec-only`); the others with it on, as the console script ends."""
    code = ("import gc, sys; from aksgpu.cli.entry import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('collecting', gc.isenabled())")
    result = subprocess.run([sys.executable, "-c", code, *args], cwd=EXAMPLE, capture_output=True, text=True,
                            check=True)
    assert result.stdout.splitlines()[-1] == f"collecting {collecting}"
