"""The evidence a verdict carries for promotion and capacity (the verdict-entry contract of
docs/guides/promotion.md): zone, secondsToVerdict, fingerprint and the check's measurements, through
the gate's real verdict path against the stand-in API server of test_gpu_node_life."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from aksgpu.node import node_api, node_gate, node_verdicts
from aksgpu.node.gpu_check.report import report_json
from aksgpu.node.gpu_check.results import CheckResult, NodeReport
from tests.test_gpu_node_life import GPU_TAINT, NOW, POLICY, ApiHandler, Cluster, serving


@pytest.fixture
def cluster() -> Iterator[tuple[Cluster, str]]:
    state = Cluster()
    with serving(state, ApiHandler) as url:
        yield state, url


def _report(gemm: list[float], bandwidth_tbs: list[float], busbw: float | None, fail: bool = False) -> NodeReport:
    results = [CheckResult("gemm", "pass", "", gpu, value, 600.0, "TFLOPS") for gpu, value in enumerate(gemm)]
    # A straggler result carries the same value: it must not count twice.
    results += [CheckResult("gemm-straggler", "pass", "", gpu, value, 0.0, "TFLOPS") for gpu, value in enumerate(gemm)]
    results += [CheckResult("memory-bandwidth", "fail" if fail else "pass", "", gpu, value, 2.5, "TB/s")
                for gpu, value in enumerate(bandwidth_tbs)]
    if busbw is not None:
        results.append(CheckResult("nccl-allreduce", "pass", "", None, busbw, 300.0, "GB/s"))
    return NodeReport("standard", results, 30.0)


def test_measurements_are_the_medians_over_gpus_in_the_contract_units() -> None:
    found = node_verdicts.measurements(report_json(_report([700.0, 710.0, 690.0, 100.0], [3.0, 3.1, 2.9, 3.2], 480.04)))
    assert found == {"gemmTflopsMedian": 695.0, "hbmBandwidthGbpsMedian": 3050.0, "ncclBusBwGbps": 480.0}


def test_measurements_are_absent_where_the_check_measured_nothing() -> None:
    assert node_verdicts.measurements({}) == {}
    assert node_verdicts.measurements({"gpus": {"0": {"checks": [{"check": "ecc", "verdict": "pass"}]}}}) == {}
    assert node_verdicts.measurements({"gpus": "garbage", "nodeChecks": [1, {"check": "nccl-allreduce"}]}) == {}


def _pending(state: Cluster, name: str) -> None:
    state.add_node(name, "h100", {node_api.HEALTH_LABEL: "pending", node_verdicts.ZONE_LABEL: "eastus2-1",
                                  "nvidia.com/cuda.driver-version.full": "580.105.08"},
                   {node_api.PENDING_SINCE_ANNOTATION: "2026-11-26T11:50:00Z"},
                   [GPU_TAINT, {"key": node_api.GATE_TAINT_KEY, "value": "pending", "effect": "NoSchedule"}])


def _results(tmp_path: Path, code: int, report: NodeReport) -> str:
    (tmp_path / "exit-code").write_text(f"{code}\n")
    (tmp_path / "report.json").write_text(json.dumps(report_json(report)))
    return str(tmp_path)


def test_a_passed_gate_verdict_records_zone_time_fingerprint_and_measurements(
        cluster: tuple[Cluster, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state, url = cluster
    monkeypatch.setenv(node_verdicts.GPU_OPERATOR_VERSION_ENV, "v26.7.0")
    _pending(state, "aks-h100-1")
    outcome = node_gate.verdict(node_api.Api(url, "gate", None), "aks-h100-1",
                                _results(tmp_path, 0, _report([700.0, 702.0], [3.0, 3.2], 450.0)), now=NOW,
                                policy=POLICY)
    assert outcome == "passed"
    [entry] = state.record()
    assert entry["zone"] == "eastus2-1"
    assert entry["secondsToVerdict"] == 7200  # created 10:00, verdict 12:00
    assert entry["fingerprint"] == {"nodeImage": "AKSUbuntu-2204gen2containerd-202611.10.0",
                                    "kernel": "5.15.0-1079-azure", "driver": "580.105.08", "gpuOperator": "v26.7.0"}
    assert entry["measurements"] == {"gemmTflopsMedian": 701.0, "hbmBandwidthGbpsMedian": 3100.0,
                                     "ncclBusBwGbps": 450.0}
    # The node's own fingerprint annotation (what a re-check compares) is unchanged by the operator key.
    annotation = json.loads(state.nodes["aks-h100-1"]["metadata"]["annotations"][node_api.FINGERPRINT_ANNOTATION])
    assert "gpuOperator" not in annotation


def test_a_failed_gate_verdict_keeps_what_was_measured(cluster: tuple[Cluster, str], tmp_path: Path) -> None:
    state, url = cluster
    _pending(state, "aks-h100-1")
    outcome = node_gate.verdict(node_api.Api(url, "gate", None), "aks-h100-1",
                                _results(tmp_path, 1, _report([700.0], [1.0], None, fail=True)), now=NOW,
                                policy=POLICY)
    assert outcome == "failed"
    [entry] = state.record()
    assert entry["check"] == "memory-bandwidth"
    assert entry["measurements"] == {"gemmTflopsMedian": 700.0, "hbmBandwidthGbpsMedian": 1000.0}


def test_only_gate_verdicts_carry_seconds_to_verdict() -> None:
    node = {"metadata": {"name": "n", "creationTimestamp": "2026-11-26T10:00:00Z", "labels": {}}}
    assert "secondsToVerdict" not in node_verdicts.verdict_entry(node, "recheck", "passed", None, "", NOW)
    assert node_verdicts.verdict_entry(node, "gate", "passed", None, "", NOW)["secondsToVerdict"] == 7200


def _largest_entry(index: int) -> dict[str, object]:
    node = {"metadata": {"name": f"aks-gpupool{index:03d}-12345678-vmss{index:06d}",
                         "creationTimestamp": "2026-11-26T10:00:00Z",
                         "labels": {node_api.AGENT_POOL_LABEL: "gpupool12345",
                                    "node.kubernetes.io/instance-type": "Standard_ND128isr_NDR_GB200_v6",
                                    node_verdicts.ZONE_LABEL: "southcentralus-3",
                                    node_api.NODE_IMAGE_LABEL: "AKSUbuntu-2404gen2arm64gb200containerd-202611.10.0",
                                    "nvidia.com/cuda.driver-version.full": "580.105.08"}},
            "status": {"nodeInfo": {"kernelVersion": "6.8.0-1030-azure-nvidia-64k"}}}
    return node_verdicts.verdict_entry(node, "gate", "failed", "memory-bandwidth-straggler", "x" * 2000, NOW,
                                       {"gemmTflopsMedian": 2249.9, "hbmBandwidthGbpsMedian": 6543.2,
                                        "ncclBusBwGbps": 812.3})


def test_a_full_record_of_the_largest_ascii_entries_fits_a_configmap() -> None:
    lines = [json.dumps(_largest_entry(i), sort_keys=True) for i in range(node_verdicts.RECORD_ENTRIES)]
    assert sum(len(line) + 1 for line in lines) < node_verdicts.RECORD_BYTES < 1024 * 1024


def test_an_acceptance_entry_with_its_cross_node_figure_is_no_larger_than_a_gate_entry() -> None:
    """The acceptance's entries (fabric_acceptance.py) carry one figure, crossNodeBusBwGbps: the
    largest of them stays within the gate's largest, so the sizing above holds for a mixed record."""
    gate = _largest_entry(0)
    node = {"metadata": {"name": gate["node"], "labels": {
        node_api.AGENT_POOL_LABEL: gate["pool"], "node.kubernetes.io/instance-type": gate["vmSize"],
        node_verdicts.ZONE_LABEL: gate["zone"], node_api.NODE_IMAGE_LABEL: gate["fingerprint"]["nodeImage"],  # type: ignore[index]
        "nvidia.com/cuda.driver-version.full": "580.105.08"}},
        "status": {"nodeInfo": {"kernelVersion": "6.8.0-1030-azure-nvidia-64k"}}}
    acceptance = node_verdicts.verdict_entry(node, "acceptance", "failed", "fabric-acceptance", "x" * 2000, NOW,
                                             {"crossNodeBusBwGbps": 99999.9})
    assert acceptance["measurements"] == {"crossNodeBusBwGbps": 99999.9}
    assert len(json.dumps(acceptance, sort_keys=True)) <= len(json.dumps(gate, sort_keys=True))


class _Api:
    def __init__(self) -> None:
        self.configmap: dict[str, object] = {"metadata": {"name": node_verdicts.RECORD_CONFIGMAP}, "data": {}}

    def get_configmap(self, namespace: str, name: str) -> dict[str, object]:
        return self.configmap

    def replace_configmap(self, namespace: str, name: str, body: dict[str, object]) -> None:
        self.configmap = body


def test_the_record_drops_its_oldest_entries_rather_than_outgrow_a_configmap() -> None:
    api = _Api()
    escaped = {"reason": "é" * 512, "node": "n"}  # json.dumps escapes each to 6 bytes
    for index in range(node_verdicts.RECORD_ENTRIES):
        assert node_verdicts.append_record(api, "ns", escaped | {"i": index})  # type: ignore[arg-type]
    data = api.configmap["data"][node_verdicts.RECORD_KEY]  # type: ignore[index]
    assert len(data.encode()) <= node_verdicts.RECORD_BYTES
    kept = [json.loads(line)["i"] for line in data.splitlines()]
    assert kept[-1] == node_verdicts.RECORD_ENTRIES - 1 and kept == sorted(kept) and len(kept) < 500


def test_with_promotion_the_operator_gates_verdict_knows_the_operator_version() -> None:
    from aksgpu.components.kubernetes.gpu_gate import gate_daemonsets
    from aksgpu.spec import parse_cluster_spec
    from tests.helpers import base_spec, edit

    spec = edit(base_spec(), "nodePools.0.gpu", {"driver": "None"})

    def envs(raw: dict[str, object]) -> list[list[dict[str, object]]]:
        parsed, _ = parse_cluster_spec(raw)
        return [c.get("env", []) for d in gate_daemonsets(parsed, "aksgpu-system")
                for c in d["spec"]["template"]["spec"]["containers"] if c["name"] == "verdict"]

    assert all(node_verdicts.GPU_OPERATOR_VERSION_ENV not in str(env) for env in envs(spec)), "unchanged without"
    with_promotion = edit(spec, "promotion", {"canaryPool": "a100"})
    [env] = envs(with_promotion)
    assert {"name": node_verdicts.GPU_OPERATOR_VERSION_ENV, "value": "v26.7.0"} in env
