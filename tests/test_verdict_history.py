"""The checked-in verdict history: reading it, the export query and command, importing an export
without losing what the snapshot held (aksgpu/preflight/verdict_history.py, `aksgpu verdict-history`)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from aksgpu.cli.app import app
from aksgpu.errors import UserError
from aksgpu.node import node_verdicts
from aksgpu.preflight import verdict_history
from aksgpu.preflight.verdict_history import (history_path, import_export, merge, parse_entries, query_command,
                                              read_history, verdict_query)
from tests.helpers import EXAMPLE, copy_project

DATA = Path(__file__).resolve().parent / "data" / "verdict-history"


def test_the_prefix_and_the_record_are_the_gates() -> None:
    assert verdict_history.LOG_PREFIX == node_verdicts.LOG_PREFIX
    assert verdict_history.RECORD_CONFIGMAP == node_verdicts.RECORD_CONFIGMAP
    assert verdict_history.RECORD_KEY == node_verdicts.RECORD_KEY


def test_the_query_selects_the_gates_lines_of_the_cluster() -> None:
    kql = verdict_query(14, "gpu-prod")
    assert kql.startswith("ContainerLogV2\n") and "ago(14d)" in kql
    assert f'startswith "{node_verdicts.LOG_PREFIX} "' in kql
    assert f"substring(line, {len(node_verdicts.LOG_PREFIX) + 1})" in kql  # the JSON after "prefix "
    assert '_ResourceId endswith "/managedclusters/gpu-prod"' in kql
    assert "_ResourceId" not in verdict_query(7)
    with pytest.raises(UserError):
        verdict_query(0)


def test_the_az_command_is_one_shell_line_with_the_query_as_one_argument() -> None:
    command = query_command(30, "gpu-prod-logs", "rg-gpu-prod", "gpu-prod", "out.json")
    words = shlex.split(command.rsplit(" > ", 1)[0])
    assert words[:4] == ["az", "monitor", "log-analytics", "query"]
    query = words[words.index("--analytics-query") + 1]
    assert query == " ".join(verdict_query(30, "gpu-prod").split("\n"))
    assert words[words.index("--timespan") + 1] == "P30D"
    assert "workspace show -g rg-gpu-prod -n gpu-prod-logs --query customerId" in words[words.index("--workspace") + 1]


def test_every_export_format_gives_the_same_entries() -> None:
    snapshot = parse_entries((DATA / "zone-failures.jsonl").read_text())
    assert len(snapshot.entries) == 22 and not snapshot.skipped
    exported = parse_entries((DATA / "log-analytics-export.json").read_text())
    assert exported.entries == snapshot.entries[:4] and not exported.skipped
    record = parse_entries((DATA / "record-verdicts.txt").read_text())
    assert record.entries == snapshot.entries[2:6] and record.skipped == [5]
    logged = parse_entries("\n".join(f"{node_verdicts.LOG_PREFIX} {json.dumps(e)}" for e in snapshot.entries[:2]))
    assert logged.entries == snapshot.entries[:2]


def test_merging_keeps_every_entry_once() -> None:
    entries = parse_entries((DATA / "zone-failures.jsonl").read_text()).entries
    merged, added = merge(entries[:10], entries[5:])
    assert added == 12 and len(merged) == 22
    assert merge(merged, entries)[1] == 0


def test_import_merges_into_the_snapshot_and_never_drops_its_entries(tmp_path: Path) -> None:
    project = copy_project(EXAMPLE, tmp_path)
    assert read_history(project, "prod") is None
    first = import_export(project, "prod", (DATA / "log-analytics-export.json").read_text(), "export")
    assert (first.added, first.total) == (4, 4)
    assert history_path(project, "prod") == project / "stacks/verdicts/prod.jsonl"
    second = import_export(project, "prod", (DATA / "record-verdicts.txt").read_text(), "record")
    assert (second.added, second.total, second.skipped) == (2, 6, [5])
    assert read_history(project, "prod") == parse_entries((DATA / "zone-failures.jsonl").read_text()).entries[:6]


def test_a_broken_snapshot_refuses_the_import_and_stays_as_it_was(tmp_path: Path) -> None:
    project = copy_project(EXAMPLE, tmp_path)
    path = history_path(project, "prod")
    path.parent.mkdir(parents=True)
    path.write_text('{"verdict": "passed", "node": "a"}\nhand-edited note\n')
    with pytest.raises(UserError) as refused:
        import_export(project, "prod", (DATA / "log-analytics-export.json").read_text(), "export")
    [problem] = refused.value.problems
    assert (problem.path, problem.value, problem.source) == ("line 2", "hand-edited note", str(path))
    assert "verdict-history import prod FILE" in problem.fix
    assert path.read_text() == '{"verdict": "passed", "node": "a"}\nhand-edited note\n'
    with pytest.raises(UserError) as empty:
        import_export(project, "dev", "nothing here\n", "empty.txt")
    assert [(p.path, p.value) for p in empty.value.problems] == [("FILE argument", "empty.txt")]
    assert "nothing was written" in empty.value.problems[0].rule
    assert not history_path(project, "dev").exists()


def test_the_commands_print_the_query_and_import_the_export(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = copy_project(EXAMPLE, tmp_path)
    monkeypatch.chdir(project)
    shown = CliRunner().invoke(app, ["verdict-history", "query", "prod", "--days", "7"])
    assert shown.exit_code == 0, shown.output
    assert query_command(7, "gpu-prod-logs", "rg-gpu-prod", "gpu-prod", "verdicts-export.json") in shown.output
    assert "aksgpu verdict-history import prod verdicts-export.json" in shown.output
    done = CliRunner().invoke(app, ["verdict-history", "import", "prod", str(DATA / "zone-failures.jsonl")])
    assert done.exit_code == 0 and "22 new verdict entries, 22 in all" in done.output
    again = CliRunner().invoke(app, ["verdict-history", "import", "prod", str(DATA / "zone-failures.jsonl")])
    assert again.exit_code == 0 and "nothing new (22 entries)" in again.output
    missing = CliRunner().invoke(app, ["verdict-history", "import", "prod", "nowhere.json"])
    assert missing.exit_code == 2 and 'FILE argument = "nowhere.json": is not a file' in missing.output


def test_the_printed_query_runs_with_a_resource_group_and_a_path_a_shell_would_split() -> None:
    import shlex

    # Resource group names may hold parentheses; the output is the user's path.
    command = query_command(30, "ws", "rg (prod)", "c1", "my export.json")
    assert command.endswith("> 'my export.json'") and "-g 'rg (prod)'" in command
    assert shlex.split(command)[-1] == "my export.json"
    assert verdict_history.record_command("my verdicts.txt").endswith("> 'my verdicts.txt'")
