"""`aksgpu --help` is answered by cli/entry.py from cli/short_help.py's table (cli/short_help_table.py,
which tools/regenerate.py derives from the app), without Typer or any command module (issue 28): the
table must stay the real app's, and the text the app's text."""

from __future__ import annotations

from typing import Any

import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main
from aksgpu.cli import short_help
from aksgpu.cli.app import app

from tests.helpers import REPO


def _apps_help(columns: int) -> str:
    """What the Typer app itself prints for `aksgpu --help` (a process of its own: CliRunner lays
    help out at another width than a terminal of these columns)."""
    code = "import sys; sys.argv = ['aksgpu', '--help']; from aksgpu.cli.app import main; main()"
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True,
                            env={"COLUMNS": str(columns), "PATH": ""})
    return result.stdout


def _group() -> tuple[object, object]:
    group = typer.main.get_command(app)
    return group, group.make_context("aksgpu", [], resilient_parsing=True)


def test_the_table_lists_every_real_command_with_its_help() -> None:
    """Each command of the app, in its order, with the first paragraph of its own help."""
    group, ctx = _group()
    real = [(name, " ".join(group.get_command(ctx, name).help.split("\n\n")[0].split()))  # type: ignore[attr-defined]
            for name in group.list_commands(ctx)]  # type: ignore[attr-defined]
    stale = "aksgpu/cli/short_help_table.py is stale: run `.venv/bin/python tools/regenerate.py`"
    assert list(short_help.COMMANDS) == real, stale
    assert short_help.GROUP_HELP == " ".join(group.help.split()), stale  # type: ignore[attr-defined]
    assert list(short_help.OPTIONS) == [param.get_help_record(ctx)  # type: ignore[attr-defined]
                                        for param in group.get_params(ctx)], stale  # type: ignore[attr-defined]


def _generator() -> Any:
    sys.path.insert(0, str(REPO / "tools"))
    import short_help_table

    return short_help_table


def test_the_table_is_the_file_regenerate_writes() -> None:
    """aksgpu/cli/short_help_table.py reads as tools/short_help_table.py writes it from the app."""
    generator = _generator()
    assert not generator.stale(), "run `.venv/bin/python tools/regenerate.py`"


def test_a_changed_help_makes_the_table_stale_and_regenerate_writes_it(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A command's help that no longer reads as the table: --check's stale() says so, write() writes a
    module whose values are the new table (long lines cut into literals within ruff's 120 columns,
    quotes and backslashes kept)."""
    generator = _generator()
    table = generator.table()
    tricky = ("A help line long enough to be cut into several literals, with \"quotes\", a backslash \\ and "
              "`code`, repeated: " + "word " * 40).strip()
    table["COMMANDS"] = [*table["COMMANDS"], ("extra", tricky)]
    monkeypatch.setattr(generator, "table", lambda: table)
    monkeypatch.setattr(generator, "TABLE", tmp_path / "short_help_table.py")
    generator.TABLE.write_text((REPO / "aksgpu" / "cli" / "short_help_table.py").read_text(encoding="utf-8"),
                               encoding="utf-8")
    assert generator.stale()
    assert generator.write() and not generator.stale() and not generator.write()
    text = generator.TABLE.read_text(encoding="utf-8")
    assert max(len(line) for line in text.splitlines()) <= 120
    namespace: dict[str, Any] = {}
    exec(compile(text, str(generator.TABLE), "exec"), namespace)
    assert namespace["COMMANDS"][-1] == ("extra", tricky)
    assert [list(row) for row in namespace["COMMANDS"]] == [list(row) for row in table["COMMANDS"]]
    assert namespace["GROUP_HELP"] == table["GROUP_HELP"] and namespace["USAGE"] == table["USAGE"]


@pytest.mark.parametrize("columns", [40, 79, 80, 120])
def test_the_fast_help_is_the_apps_help(columns: int) -> None:
    """The same text, byte for byte, as Typer prints for `aksgpu --help` at this terminal width."""
    assert short_help.help_text(columns) + "\n" == _apps_help(columns)


def test_aksgpu_help_imports_no_command_module_nor_typer() -> None:
    """The console script's `aksgpu --help` (and -h) prints the app's help and exits 0, having
    imported neither Typer nor any command module."""
    code = ("import io, json, sys; sys.argv = [sys.argv[1], sys.argv[2]]; out = io.StringIO(); sys.stdout = out; "
            "from aksgpu.cli.entry import main; main(); sys.stdout = sys.__stdout__; "
            "print(json.dumps([out.getvalue(), sorted(m for m in sys.modules if m.startswith(('typer', 'click'))"
            " or m.startswith('aksgpu.cli.') and m.count('.') > 2 or m.endswith('.commands'))]))")
    expected = _apps_help(80)
    for option in ("--help", "-h"):
        result = subprocess.run([sys.executable, "-c", code, "/usr/bin/aksgpu", option], cwd=REPO,
                                capture_output=True, text=True, check=True, env={"COLUMNS": "80", "PATH": ""})
        text, modules = json.loads(result.stdout)
        assert modules == []
        assert text == expected
