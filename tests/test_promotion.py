"""The promotion decision over recorded verdicts (aksgpu/promotion/decision.py), on the fixtures of
tests/data/promotion/: each rule has a fixture or a variation that a wrong rule would decide
differently."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from aksgpu.errors import UserError
from aksgpu.node import node_verdicts
from aksgpu.promotion import records
from aksgpu.promotion.decision import Decision, Rules, decide, select

DATA = Path(__file__).resolve().parent / "data" / "promotion"
RULES = Rules(min_canary_nodes=3, min_pass_rate=0.9, gemm_tolerance=0.05, bandwidth_tolerance=0.05)


def _decide(name: str, rules: Rules = RULES, baseline: records.Verdict | None = None) -> Decision:
    found = records.read_file(DATA / f"{name}.jsonl")
    candidate, canary, base = select(found, "h100c", baseline.stack if baseline else None)
    return decide(canary, base, rules, candidate)


def test_a_healthy_canary_promotes() -> None:
    decision = _decide("healthy")
    assert decision.action == "promote", decision
    assert dict(decision.candidate)["nodeImage"] == "AKSUbuntu-2204gen2containerd-202611.10.0"
    assert decision.evidence["passed"] == 3 and decision.evidence["gemmMedian"] == {"canary": 709.0,
                                                                                    "baseline": 706.5}


def test_a_driver_mismatch_rolls_the_canary_back_with_the_failing_check() -> None:
    decision = _decide("driver-mismatch")
    assert decision.action == "rollback"
    assert "3 of 3 canary nodes failed" in decision.reasons[0] and "driver" in decision.reasons[0]
    assert all("CUDA driver version is insufficient" in why for why in decision.evidence["failures"].values())


def test_a_driver_mismatch_rolls_back_before_the_quorum() -> None:
    """Failures need no quorum: two of two failed is already a failing canary."""
    decision = _decide("driver-mismatch", dataclasses.replace(RULES, min_canary_nodes=10))
    assert decision.action == "rollback"


def test_one_failed_node_of_many_refuses_rather_than_rolls_back() -> None:
    found = records.read_file(DATA / "healthy.jsonl")
    last = found[-1]
    found[-1] = dataclasses.replace(last, verdict="failed", check="ecc", reason="GPU 2: 3 DBE errors")
    candidate, canary, base = select(found, "h100c")
    decision = decide(canary, base, RULES, candidate)
    assert decision.action == "refuse"
    assert decision.reasons == ("pass rate 2/3 = 67% is below the rule's 90%",)


def test_a_held_canary_node_is_systemic_and_rolls_back() -> None:
    found = records.read_file(DATA / "healthy.jsonl")
    found[-1] = dataclasses.replace(found[-1], verdict="held", check="gemm", reason="circuit breaker open")
    candidate, canary, base = select(found, "h100c")
    assert decide(canary, base, RULES, candidate).action == "rollback"


def test_a_slow_gemm_is_refused_with_the_figures() -> None:
    decision = _decide("slow-gemm")
    assert decision.action == "refuse"
    [reason] = decision.reasons
    assert reason.startswith("the canary's GEMM TFLOPS median 611 is 13.5% below the baseline's 706.5")


def test_the_tolerance_is_what_decides_a_slow_gemm() -> None:
    assert _decide("slow-gemm", dataclasses.replace(RULES, gemm_tolerance=0.15)).action == "promote"


def test_too_few_canary_nodes_wait_and_say_how_many() -> None:
    decision = _decide("partial-data")
    assert decision.action == "wait"
    assert decision.reasons == ("2 of the 3 canary nodes the rule needs have a final verdict on nodeImage "
                                "AKSUbuntu-2204gen2containerd-202611.10.0, driver 580.105.08",)


def test_a_missing_measurement_waits_and_names_it() -> None:
    decision = _decide("partial-data", dataclasses.replace(RULES, min_canary_nodes=2, nccl_floor_gbps=400.0))
    assert decision.action == "wait"
    # Both passed nodes recorded bandwidth; the second has neither a GEMM nor an NCCL figure.
    assert decision.missing == (
        "the canary's GEMM TFLOPS on aks-h100c-87654321-vmss000001 (each passed canary node must record it: the "
        "gate's check level must include the GEMM and bandwidth checks)",
        "the canary's NCCL bus bandwidth on aks-h100c-87654321-vmss000001 (the rule has a floor)")


def test_no_gemm_anywhere_on_the_canary_is_missing() -> None:
    found = [dataclasses.replace(r, measurements=records.Measurements(hbm_gbps=2950.0)) if r.pool == "h100c" else r
             for r in records.read_file(DATA / "healthy.jsonl")]
    candidate, canary, base = select(found, "h100c")
    decision = decide(canary, base, RULES, candidate)
    assert decision.action == "wait"
    assert [m.split(" on ")[0] for m in decision.missing] == ["the canary's GEMM TFLOPS"]


def test_without_a_baseline_the_comparison_waits() -> None:
    found = [r for r in records.read_file(DATA / "healthy.jsonl") if r.pool == "h100c"]
    candidate, canary, base = select(found, "h100c")
    decision = decide(canary, base, RULES, candidate)
    assert decision.action == "wait" and len(decision.missing) == 2


def test_the_nccl_floor_refuses_a_slow_fabric() -> None:
    decision = _decide("healthy", dataclasses.replace(RULES, nccl_floor_gbps=490.0))
    assert decision.action == "refuse"
    assert decision.reasons[0].startswith("NCCL bus bandwidth 482 GB/s on aks-h100c-87654321-vmss000000")


def test_on_an_infiniband_canary_the_floor_holds_the_cross_node_figure() -> None:
    """slow-fabric: every canary node's intra-node all-reduce (482 GB/s) clears the floor, but one
    node's cross-node acceptance measured 371.6 GB/s (above Azure's 300 GB/s line, so the acceptance
    passed it; below the rule's 400)."""
    decision = _decide("slow-fabric", dataclasses.replace(RULES, nccl_floor_gbps=400.0))
    assert decision.action == "refuse", decision
    assert decision.reasons == ("cross-node NCCL bus bandwidth 371.6 GB/s on aks-h100c-87654321-vmss000002 is "
                                "below the floor 400 GB/s (the cross-node acceptance's all-reduce between pairs "
                                "of nodes)",)
    nccl = decision.evidence["ncclBusBwGbps"]
    assert nccl["figure"] == "crossNodeBusBwGbps" and nccl["canaryMin"] == 371.6 and nccl["floor"] == 400.0
    # The GEMM and bandwidth medians are the gate's, from each node's "accepting" verdict: the
    # acceptance's final verdict carries the cross-node figure only.
    assert decision.evidence["gemmMedian"] == {"canary": 709.0, "baseline": 706.5}


def test_an_infiniband_canary_over_the_floor_promotes_on_the_merged_figures() -> None:
    decision = _decide("slow-fabric", dataclasses.replace(RULES, nccl_floor_gbps=300.0))
    assert decision.action == "promote", decision
    assert decision.evidence["ncclBusBwGbps"]["figure"] == "crossNodeBusBwGbps"
    assert decision.evidence["passed"] == 3 and decision.missing == ()


def test_without_the_acceptance_the_floor_holds_the_intra_node_figure() -> None:
    decision = _decide("healthy", dataclasses.replace(RULES, nccl_floor_gbps=400.0))
    assert decision.action == "promote"
    assert decision.evidence["ncclBusBwGbps"] == {
        "canaryMin": 482.0, "floor": 400.0, "figure": "ncclBusBwGbps",
        "measuredBy": "the gate check's all-reduce within each node"}


def test_an_acceptance_verdict_without_the_cross_node_figure_is_missing_not_replaced() -> None:
    """An acceptance older than the figure (or a node released unmeasured): the intra-node figure
    does not stand in for it."""
    found = records.read_file(DATA / "slow-fabric.jsonl")
    found[-1] = dataclasses.replace(found[-1], measurements=records.Measurements())
    candidate, canary, base = select(found, "h100c")
    decision = decide(canary, base, dataclasses.replace(RULES, nccl_floor_gbps=400.0), candidate)
    assert decision.action == "wait", decision
    assert decision.missing == (
        "the canary's cross-node NCCL bus bandwidth on aks-h100c-87654321-vmss000002 (the rule has a floor; the "
        "pool runs the cross-node acceptance: a node it released unmeasured, or an acceptance older than this "
        "figure, records none)",)


def test_the_pinned_baseline_narrows_the_comparison() -> None:
    found = records.read_file(DATA / "healthy.jsonl")
    other = (("nodeImage", "AKSUbuntu-2204gen2containerd-202609.01.0"),)
    candidate, canary, base = select(found, "h100c", other)
    assert base == [] and len(canary) == 3


def test_entries_parse_from_log_lines_configmaps_and_lists(tmp_path: Path) -> None:
    lines = (DATA / "healthy.jsonl").read_text().splitlines()
    logs = tmp_path / "logs.txt"
    logs.write_text("\n".join(f"2026-11-26T10:00:00Z stdout F {node_verdicts.LOG_PREFIX} {line}" for line in lines))
    configmap = tmp_path / "cm.json"
    configmap.write_text(json.dumps({"kind": "ConfigMap", "data": {"verdicts": "\n".join(lines)}}))
    listed = tmp_path / "list.json"
    listed.write_text(json.dumps([json.loads(line) for line in lines]))
    expected = records.read_file(DATA / "healthy.jsonl")
    assert records.read_file(logs) == records.read_file(configmap) == records.read_file(listed) == expected


def test_old_entries_without_evidence_keys_parse() -> None:
    [record] = records.parse_lines(['{"node": "n", "verdict": "passed", "pool": "p", "time": "bad"}'])
    assert record.fingerprint == {} and record.measurements == records.Measurements() and record.time is None


def test_an_empty_or_missing_file_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "empty.jsonl").write_text("not json\n")
    with pytest.raises(UserError) as empty:
        records.read_file(tmp_path / "empty.jsonl")
    [problem] = empty.value.problems
    assert (problem.path, problem.value) == ("--verdicts", str(tmp_path / "empty.jsonl"))
    assert "kubectl get configmap aksgpu-gpu-health-record" in problem.fix
    with pytest.raises(UserError, match="cannot read the verdicts file"):
        records.read_file(tmp_path / "absent.jsonl")


def _entries(name: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in (DATA / f"{name}.jsonl").read_text().splitlines() if line.strip()]


def _as_records(entries: list[dict[str, object]]) -> list[records.Verdict]:
    return records.parse_lines([json.dumps(entry) for entry in entries])


def test_verdicts_without_the_candidates_driver_are_not_evidence_for_it() -> None:
    # Passed canary verdicts that name only the node image (GPU Feature Discovery had not labelled
    # the driver: they may come from the driver before) and one node really on the new driver 580.
    entries = _entries("healthy")
    canary = [e for e in entries if e["pool"] == "h100c"]
    for entry in canary:
        fingerprint = dict(entry["fingerprint"])  # type: ignore[call-overload]
        fingerprint.pop("driver")
        entry["fingerprint"] = fingerprint
    newest = {**canary[-1], "node": "aks-h100c-87654321-vmss000099", "time": "2026-11-27T00:00:00Z",
              "fingerprint": {**canary[-1]["fingerprint"], "driver": "580.105.08"}}  # type: ignore[dict-item]
    found = _as_records([*entries, newest])
    candidate, canary_records, _ = select(found, "h100c")
    assert dict(candidate)["driver"] == "580.105.08"
    assert [r.node for r in canary_records] == ["aks-h100c-87654321-vmss000099"]
    decision = decide(canary_records, select(found, "h100c")[2], RULES, candidate)
    assert decision.action == "wait", decision


def test_nodes_the_watchdog_failed_count_against_the_canary() -> None:
    # A driver that never loads: the check never runs, the watchdog fails the node (gate-timeout),
    # and its fingerprint has no driver label. Those nodes are canary failures, not absent nodes.
    entries = _entries("healthy")
    canary = [e for e in entries if e["pool"] == "h100c"]
    hung = [{**canary[0], "node": f"aks-h100c-87654321-vmss00010{index}", "source": "watchdog",
             "verdict": "failed", "check": "gate-timeout", "reason": "the check never finished",
             "measurements": {}, "time": f"2026-11-27T0{index}:00:00Z",
             "fingerprint": {"nodeImage": canary[0]["fingerprint"]["nodeImage"]}}  # type: ignore[index]
            for index in range(len(canary))]
    decision = _decide_entries([*entries, *hung])
    assert decision.action in ("rollback", "refuse"), decision
    assert decision.action != "promote"


def _decide_entries(entries: list[dict[str, object]]) -> Decision:
    found = _as_records(entries)
    candidate, canary, base = select(found, "h100c")
    return decide(canary, base, RULES, candidate)
