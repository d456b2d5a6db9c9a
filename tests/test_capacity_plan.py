"""The plan's capacity section: its decision rules as pure functions over recorded verdict histories
(aksgpu/preflight/capacity.py), and the section in the plans of the example stacks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from aksgpu import catalog
from aksgpu.cli.app import app
from aksgpu.preflight.capacity import ANY_ZONE, Rate, adjusted, capacity, failure_rates, scale_out
from aksgpu.preflight.verdict_history import parse_entries
from aksgpu.spec import parse_cluster_spec
from tests.helpers import EXAMPLE, EXAMPLES, base_spec, copy_project, edit

DATA = Path(__file__).resolve().parent / "data" / "verdict-history"
CRG = ("/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg-capacity/providers/"
       "Microsoft.Compute/capacityReservationGroups/crg-h100")


def _history(name: str) -> list[dict[str, Any]]:
    return parse_entries((DATA / name).read_text()).entries


def _h100(**pool: Any) -> Any:
    h100 = {"name": "h100", "kind": "gpu", "vmSize": "Standard_ND96isr_H100_v5", "zones": ["1"], "minCount": 0,
            "maxCount": 16, "balloonNodes": 2, "capacityReservationGroupId": CRG,
            "capacityReservations": {"1": 18}, **pool}
    spec, _ = parse_cluster_spec(edit(edit(base_spec(), "location", "eastus2"), "nodePools", [h100]))
    return spec


def test_the_failure_rate_is_per_zone_over_new_nodes_only() -> None:
    rates = failure_rates(_history("zone-failures.jsonl"), _h100().node_pools[0])
    # Re-checks and repairs are not new nodes: zone 1 keeps 3 of 10 failed.
    assert rates == {"1": Rate(10, 3), "2": Rate(10, 0), ANY_ZONE: Rate(20, 3)}
    assert adjusted(18, rates["1"]) == 24 and adjusted(18, rates["2"]) == 18 and adjusted(18, None) == 18


def test_partial_entries_count_where_they_can() -> None:
    pool = _h100().node_pools[0]
    rates = failure_rates(_history("partial.jsonl"), pool)
    # No zone: counted for the size as a whole; no vmSize: matched by the pool; no node: not counted;
    # the A100 node is another size; the node the breaker held is no hardware failure, not counted.
    assert rates == {ANY_ZONE: Rate(3, 0), "1": Rate(1, 0)}
    measured = scale_out(_h100(), pool, _history("partial.jsonl"))
    assert measured.measured == 1 and "median 1500 s" in measured.basis


def test_no_history_estimates_from_anchors() -> None:
    spec = _h100()
    estimate = scale_out(spec, spec.node_pools[0], None)
    table = catalog.load("deploy_durations")
    startup = sum(row["seconds"] for row in table["gpuNodeStartup"]["startup"] if row.get("driver") in (None, "Install")
                  and row.get("fabric") in (None, "infiniband"))
    provision = sum(row["seconds"] for row in table["gpuNodeStartup"]["provision"])
    assert estimate.measured == 0 and estimate.basis.startswith("anchors")
    assert estimate.seconds == (table["scaleOut"]["autoscalerGpuDelay"]["seconds"] + provision + startup
                                + table["scaleOut"]["defaultCheck"]["seconds"])
    [found] = capacity(spec, None)
    assert found.document["failureRates"] == {} and found.warnings == []
    assert found.document["balloons"] == {"configured": 2, "adjusted": 2, "failureRate": None}


def test_a_history_replaces_the_anchors_with_measured_node_to_verdict_times() -> None:
    spec = _h100()
    estimate = scale_out(spec, spec.node_pools[0], _history("zone-failures.jsonl"))
    before = estimate.seconds - 1140  # median of 900..1440 by 60 s, twice: 1140 s
    assert estimate.measured == 20 and estimate.high_seconds - before == 1380  # p90
    assert "measured" in estimate.basis


def test_configured_headroom_below_the_reliability_adjusted_figure_is_warned() -> None:
    [found] = capacity(_h100(), _history("zone-failures.jsonl"))
    rows = {row["zone"]: row for row in found.document["reservations"]}
    assert rows["1"] == {"zone": "1", "needed": 18, "adjusted": 24, "reserved": 18, "failureRate": 0.3}
    assert found.document["balloons"] == {"configured": 2, "adjusted": 3, "failureRate": 0.3}
    assert [w.split(":")[0] for w in found.warnings] == ["nodePools[0].capacityReservations.1",
                                                         "nodePools[0].balloonNodes"]
    # The same pool in the zone without failures: the configured figures suffice.
    [quiet] = capacity(_h100(zones=["2"], capacityReservations={"2": 18}), _history("zone-failures.jsonl"))
    assert quiet.warnings == []


@pytest.mark.parametrize("stack", EXAMPLES)
def test_the_example_plans_show_the_capacity_of_each_gpu_pool(stack: str, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    project = copy_project(EXAMPLE, tmp_path)
    monkeypatch.chdir(project)
    result = CliRunner().invoke(app, ["plan", f"stacks/Pulumi.{stack}.yaml"])
    assert result.exit_code == 0, result.output[-2000:]
    section = result.stdout.split("Capacity of the GPU pools", 1)[1].split("\nCost estimate", 1)[0]
    assert "anchors only: no verdict history" in section
    spec, _ = parse_cluster_spec(__import__("yaml").safe_load((project / f"stacks/Pulumi.{stack}.yaml").read_text())
                                 ["config"]["aksgpu:cluster"])
    for pool in (p for p in spec.node_pools if p.kind == "gpu"):
        assert f"  {pool.name} ({pool.vm_size}):" in section and "scale-out to maxCount" in section


def _with_history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = copy_project(EXAMPLE, tmp_path)
    (project / "stacks" / "verdicts").mkdir()
    shutil.copy(DATA / "zone-failures.jsonl", project / "stacks" / "verdicts" / "prod.jsonl")
    monkeypatch.chdir(project)


def test_a_checked_in_history_changes_the_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _with_history(tmp_path, monkeypatch)
    result = CliRunner().invoke(app, ["plan", "stacks/Pulumi.prod.yaml", "--json"])
    assert result.exit_code == 0, result.output[-2000:]
    section = json.loads(result.stdout)["preflight"]["capacity"]
    assert section["history"] == "stacks/verdicts/prod.jsonl" and section["historyEntries"] == 22
    [h100] = [pool for pool in section["pools"] if pool["pool"] == "h100"]
    assert h100["failureRates"]["1"] == {"nodes": 10, "failed": 3} and h100["scaleOut"]["measuredVerdicts"] == 20


@pytest.mark.slow  # plans the example three times: seconds
def test_a_checked_in_history_changes_the_plan_deterministically(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _with_history(tmp_path, monkeypatch)
    runs = [CliRunner().invoke(app, ["plan", "stacks/Pulumi.prod.yaml", "--json"]) for _ in range(2)]
    assert runs[0].exit_code == 0 and runs[0].stdout == runs[1].stdout
    section = json.loads(runs[0].stdout)["preflight"]["capacity"]
    assert section["history"] == "stacks/verdicts/prod.jsonl" and section["historyEntries"] == 22
    [h100] = [pool for pool in section["pools"] if pool["pool"] == "h100"]
    assert h100["failureRates"]["1"] == {"nodes": 10, "failed": 3} and h100["scaleOut"]["measuredVerdicts"] == 20
    text = CliRunner().invoke(app, ["plan", "stacks/Pulumi.prod.yaml"]).stdout
    assert "gate's verdict history stacks/verdicts/prod.jsonl" in text and "zone 1: 3 of 10 new nodes failed" in text


def test_infiniband_nodes_count_once_by_their_final_outcome() -> None:
    # On an InfiniBand pool the gate records "accepting" for a node that passed its check (the
    # cross-node acceptance is due: node/node_gate.py), the acceptance then passes or fails it, and
    # the watchdog fails a node whose check never finished (gate-timeout).
    pool = _h100().node_pools[0]
    base = {"pool": "h100", "vmSize": "Standard_ND96isr_H100_v5", "zone": "eastus2-1", "time": "2026-11-01T10:00:00Z"}
    history = [{**base, "node": f"n{index}", "source": "gate", "verdict": "accepting"} for index in range(9)]
    history += [{**base, "node": f"n{index}", "source": "acceptance", "verdict": "passed"} for index in range(8)]
    history += [{**base, "node": "n8", "source": "acceptance", "verdict": "failed"},
                {**base, "node": "n9", "source": "gate", "verdict": "failed", "check": "gemm"},
                {**base, "node": "n10", "source": "watchdog", "verdict": "failed", "check": "gate-timeout"},
                {**base, "node": "n11", "source": "watchdog", "verdict": "released", "check": None}]
    assert failure_rates(history, pool)["1"] == Rate(11, 3)
    assert adjusted(18, Rate(11, 3)) == 23
