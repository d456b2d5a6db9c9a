"""docs/guides/capacity.md: every aksgpu command it shows runs as shown in the example project, and
the plan's capacity section reads as the guide quotes it."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from aksgpu.cli.app import app
from tests.docs_pages import docs_page
from tests.helpers import EXAMPLE, copy_project

DATA = Path(__file__).resolve().parent / "data" / "verdict-history"
GUIDE = docs_page("guides/capacity.md")


def _commands() -> list[str]:
    blocks = GUIDE.split("```")[1::2]
    return [line for block in blocks for line in block.splitlines() if line.startswith("aksgpu ")]


def test_the_guide_shows_the_commands_it_explains() -> None:
    assert _commands() == ["aksgpu plan prod", "aksgpu verdict-history query prod --days 30",
                           "aksgpu verdict-history import prod verdicts-export.json"]


@pytest.mark.slow
def test_every_command_of_the_guide_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = copy_project(EXAMPLE, tmp_path)
    shutil.copy(DATA / "log-analytics-export.json", project / "verdicts-export.json")
    monkeypatch.chdir(project)
    outputs = {}
    for command in _commands():
        result = CliRunner().invoke(app, shlex.split(command)[1:])
        assert result.exit_code == 0, (command, result.output[-2000:])
        outputs[command] = result.stdout
    quoted = GUIDE.split("prints, after the quota and address sections, one block per GPU pool:")[1].split("```")[1]
    for line in quoted.strip().splitlines()[1:]:
        assert line.split("(")[0].rstrip() in outputs["aksgpu plan prod"], line
    assert "az monitor log-analytics query" in outputs["aksgpu verdict-history query prod --days 30"]
    assert (project / "stacks" / "verdicts" / "prod.jsonl").is_file()
