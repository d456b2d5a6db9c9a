"""The capacity section in a fleet's plan (each member's, from its own verdict history, as `aksgpu
plan STACK` shows it), and the verdict-history export command of a member that logs to the fleet's
shared workspace (named from the fleet's spec, as the shared stack creates it)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from aksgpu.cli.app import app
from aksgpu.preflight.verdict_history import query_command, workspace_of
from aksgpu.spec import ClusterSpec, parse_cluster_spec
from aksgpu.spec.fleet import FleetSpec, parse_fleet_spec
from aksgpu.stack_config import CLUSTER_KEY, FLEET_KEY
from tests.helpers import FLEET_EXAMPLE, copy_project

DATA = Path(__file__).resolve().parent / "data" / "verdict-history"
MEMBERS = ["training-canary", "training-eastus2", "training-westus3"]


@pytest.fixture
def fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "fleet").mkdir()
    project = copy_project(FLEET_EXAMPLE, tmp_path / "fleet")
    monkeypatch.chdir(project)
    return project


def _with_history(project: Path, stack: str) -> None:
    (project / "stacks" / "verdicts").mkdir(exist_ok=True)
    shutil.copy(DATA / "zone-failures.jsonl", project / "stacks" / "verdicts" / f"{stack}.jsonl")


def test_the_fleet_plan_shows_each_members_capacity_from_its_own_history(fleet: Path) -> None:
    _with_history(fleet, "training-eastus2")
    result = CliRunner().invoke(app, ["plan", "training", "--json"])
    assert result.exit_code == 0, result.output[-2000:]
    members = json.loads(result.stdout)["members"]
    assert list(members) == MEMBERS
    eastus2 = members["training-eastus2"]["capacity"]
    assert eastus2["history"] == "stacks/verdicts/training-eastus2.jsonl" and eastus2["historyEntries"] == 22
    [h100] = eastus2["pools"]
    assert h100["failureRates"]["1"] == {"nodes": 10, "failed": 3} and h100["scaleOut"]["measuredVerdicts"] == 20
    for stack in ("training-canary", "training-westus3"):
        assert members[stack]["capacity"]["history"] is None and members[stack]["capacity"]["pools"]


@pytest.mark.slow  # plans the fleet three times and a member once: seconds
def test_the_fleets_capacity_reads_the_same_every_time_in_the_members_plan_and_as_text(fleet: Path) -> None:
    _with_history(fleet, "training-eastus2")
    runs = [CliRunner().invoke(app, ["plan", "training", "--json"]) for _ in range(2)]
    assert runs[0].exit_code == 0, runs[0].output[-2000:]
    assert runs[0].stdout == runs[1].stdout, "deterministic"
    eastus2 = json.loads(runs[0].stdout)["members"]["training-eastus2"]["capacity"]
    # The member's own plan shows the same section.
    alone = CliRunner().invoke(app, ["plan", "training-eastus2", "--json"])
    assert alone.exit_code == 0 and json.loads(alone.stdout)["preflight"]["capacity"] == eastus2

    text = CliRunner().invoke(app, ["plan", "training"]).stdout
    sections = text.split("\nCapacity of the GPU pools of member ")[1:]
    assert [section.split(" ", 1)[0] for section in sections] == MEMBERS
    assert "gate's verdict history stacks/verdicts/training-eastus2.jsonl" in sections[1]
    assert "zone 1: 3 of 10 new nodes failed" in sections[1] and "anchors only" in sections[0]


def test_a_broken_member_history_stops_the_fleet_plan_naming_the_file_and_line(fleet: Path) -> None:
    (fleet / "stacks" / "verdicts").mkdir()
    (fleet / "stacks" / "verdicts" / "training-westus3.jsonl").write_text("not a verdict\n")
    result = CliRunner().invoke(app, ["plan", "training"])
    assert result.exit_code == 2, result.output[-2000:]
    assert "training-westus3.jsonl" in result.output and "line 1" in result.output
    assert "Traceback" not in result.output


def _specs(project: Path, member: str) -> tuple[ClusterSpec, FleetSpec]:
    def config(stack: str) -> dict[str, object]:
        return yaml.safe_load((project / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"]

    cluster, _ = parse_cluster_spec(config(member)[CLUSTER_KEY])
    shared, _ = parse_fleet_spec(config("training")[FLEET_KEY])
    return cluster, shared


def test_a_member_on_the_fleets_workspace_gets_a_command_that_runs_as_printed(fleet: Path) -> None:
    shown = CliRunner().invoke(app, ["verdict-history", "query", "training-westus3", "--days", "7"])
    assert shown.exit_code == 0, shown.output
    # The shared stack's per-region workspace (components/fleet.py), in the fleet's resource group.
    assert query_command(7, "gpu-training-westus3-logs", "rg-gpu-training-fleet", "gpu-westus3",
                         "verdicts-export.json") in shown.output
    assert ("az monitor log-analytics workspace show -g rg-gpu-training-fleet -n gpu-training-westus3-logs "
            "--query customerId -o tsv") in shown.output
    assert "<customer ID" not in shown.output


def test_the_fleets_workspace_per_region_single_or_unknown(fleet: Path) -> None:
    cluster, shared = _specs(fleet, "training-eastus2")
    assert workspace_of(cluster, shared) == ("gpu-training-eastus2-logs", "rg-gpu-training-fleet")
    single = shared.model_copy(update={"log_analytics": shared.log_analytics.model_copy(update={"mode": "single"})})
    assert workspace_of(cluster, single) == ("gpu-training-logs", "rg-gpu-training-fleet")
    per_member = shared.model_copy(update={"log_analytics": shared.log_analytics.model_copy(
        update={"mode": "perMember"})})
    assert workspace_of(cluster, per_member) == workspace_of(cluster), "no shared workspace: the placeholder"
    placeholder = workspace_of(cluster)
    assert isinstance(placeholder, tuple) and placeholder[1] is None and placeholder[0].startswith("<customer ID")


def test_without_the_fleets_stack_file_the_command_keeps_the_placeholder(fleet: Path) -> None:
    (fleet / "stacks" / "Pulumi.training.yaml").unlink()
    shown = CliRunner().invoke(app, ["verdict-history", "query", "training-eastus2"])
    assert shown.exit_code == 0, shown.output
    assert "--workspace <customer ID of the fleet's workspace in the cluster's region>" in shown.output


def test_the_fleets_shared_stack_is_refused_as_the_stack_argument(fleet: Path) -> None:
    # The shared stack holds the fleet, no cluster: verdicts are a member's.
    refused = CliRunner().invoke(app, ["verdict-history", "query", "training"])
    assert refused.exit_code == 2
    said = " ".join(refused.output.split())
    assert 'STACK argument = "training": Pulumi.training.yaml holds no cluster' in said
    assert "Fix: pass a member's stack" in said
