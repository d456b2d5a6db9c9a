"""aksgpu's GPU health check (aksgpu/components/kubernetes/gpu_check): the decisions with NVML
replaced by a fake probe, the measurements for real on the CPU build of PyTorch at tiny sizes,
the report and Prometheus formats checked with prometheus_client's own parser, and the gate's
node actions against a fake API server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from prometheus_client.parser import text_string_to_metric_families

from aksgpu.components.kubernetes import node_gate
from aksgpu.components.kubernetes.gpu_check import interconnect, measure, report, results, run, thresholds, xids
from aksgpu.components.kubernetes.gpu_check.probe import GpuState, error_checks, inventory_checks
from tests.test_gpu_health import GATE_SINCE, GPU_TAINT, NOW, FakeApi, _node, api_server  # noqa: F401

TINY = measure.Sizes(gemm_n=64, gemm_iters=3, warmup=1, copy_bytes=1 << 16, copy_iters=3, pattern_fraction=0.5,
                     pattern_passes=1)
H100 = "NVIDIA H100 80GB HBM3"


def healthy(index: int, name: str = H100) -> GpuState:
    return GpuState(index, name, f"GPU-{index}", 80 << 30, volatile_uncorrected_ecc=0, aggregate_uncorrected_ecc=0,
                    remapped_rows_pending=False, remapping_failed=False, retired_pages_pending=False,
                    throttle_reasons=0, temperature_c=35, slowdown_temperature_c=87, pcie_gen=5, pcie_gen_max=5,
                    pcie_width=16, pcie_width_max=16)


class FakeProbe:
    def __init__(self, states: list[GpuState], driver: str | None = "580.159.04") -> None:
        self.states, self.driver = states, driver

    def driver_version(self) -> str | None:
        return self.driver

    def gpus(self) -> list[GpuState]:
        return self.states


def by_check(found: list[results.CheckResult], check: str) -> list[results.CheckResult]:
    return [r for r in found if r.check == check]


# --- thresholds ---------------------------------------------------------------------------

def test_limits_come_from_the_catalog_peak_and_the_fraction_table() -> None:
    catalog = thresholds.catalog()
    limits = thresholds.limits("H100 SXM", "Standard_ND96isr_H100_v5")
    peak = catalog["gpuModels"]["H100 SXM"]["bf16DenseTflops"]
    assert limits.tflops_floor == round(peak * thresholds.table()["computeFraction"]["H100 SXM"]["value"], 1)
    assert limits.expected_gpus == catalog["sizes"]["Standard_ND96isr_H100_v5"]["gpus"] == 8
    assert limits.infiniband_gbps == 400 and limits.straggler_tolerance == 0.10
    unknown = thresholds.limits(None, None)
    assert unknown.tflops_floor is None and unknown.expected_gpus is None and "no peak" in unknown.tflops_source


@pytest.mark.parametrize(("name", "model"), [
    (H100, "H100 SXM"), ("NVIDIA H100 NVL", "H100 NVL"), ("NVIDIA H200", "H200"),
    ("NVIDIA A100-SXM4-80GB", "A100 80GB"), ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe"), ("Tesla T4", "T4"),
    ("NVIDIA B300", None), ("NVIDIA A100-PCIE-40GB", None), ("NVIDIA A10", "A10"), ("NVIDIA A10-24Q", "A10"),
    ("NVIDIA H200 NVL", None),
])
def test_nvml_names_map_to_catalog_models(name: str, model: str | None) -> None:
    assert thresholds.model_of(name) == model
    assert model is None or model in thresholds.catalog()["gpuModels"]


# --- inventory and error state ---------------------------------------------------------------

def test_the_gpu_count_must_match_the_vm_size() -> None:
    limits = thresholds.limits("H100 SXM", "Standard_ND96isr_H100_v5")
    seven = inventory_checks([healthy(i) for i in range(7)], limits, "580", None, None)
    assert by_check(seven, "gpu-count")[0].verdict == "fail" and "7 GPUs, the VM size has 8" in seven[1].reason
    told = inventory_checks([healthy(0)], limits, "580", 2, None)
    assert "1 GPUs, expected (--expect-gpus) 2" in by_check(told, "gpu-count")[0].reason
    eight = inventory_checks([healthy(i) for i in range(8)], limits, "580", None, "H100 SXM")
    assert all(r.verdict == "pass" for r in eight)
    wrong = inventory_checks([healthy(0, "NVIDIA A100-SXM4-80GB")], limits, None, 1, "H100 SXM")
    assert {r.check for r in wrong if r.verdict == "fail"} == {"driver", "gpu-model"}


@pytest.mark.parametrize(("change", "check", "verdict"), [
    ({"volatile_uncorrected_ecc": 2}, "ecc-volatile-uncorrected", "fail"),
    ({"aggregate_uncorrected_ecc": 1}, "ecc-aggregate-uncorrected", "warn"),
    ({"remapped_rows_pending": True}, "row-remap-pending", "fail"),
    ({"remapping_failed": True}, "row-remap-failed", "fail"),
    ({"retired_pages_pending": True}, "retired-pages-pending", "fail"),
    ({"throttle_reasons": 0x8}, "throttle", "fail"),        # HW slowdown
    ({"throttle_reasons": 0x80 | 0x4}, "throttle", "fail"),  # HW power brake beside the (normal) SW power cap
    ({"throttle_reasons": 0x20}, "throttle", "warn"),       # SW thermal slowdown
    ({"throttle_reasons": 0x4 | 0x1}, "throttle", "pass"),  # power cap and idle are normal
    ({"temperature_c": 84}, "temperature", "fail"),         # within 5 C of the 87 C slowdown
    ({"pcie_width": 8}, "pcie-width", "fail"),
    ({"pcie_gen": 1}, "pcie-gen", "warn"),                  # an idle link saves power
    ({"volatile_uncorrected_ecc": None}, "ecc-volatile-uncorrected", "skip"),
])
def test_error_state(change: dict[str, Any], check: str, verdict: str) -> None:
    limits = thresholds.limits("H100 SXM", None)
    good = error_checks([healthy(0)], limits)
    assert all(r.verdict == "pass" for r in good), [r for r in good if r.verdict != "pass"]
    state = healthy(0)
    for key, value in change.items():
        setattr(state, key, value)
    assert [r.verdict for r in by_check(error_checks([state], limits), check)] == [verdict]


def test_xids_from_the_kernel_log() -> None:
    log = ("6,1234,5678,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus.\n"
           "6,1235,5679,-;NVRM: Xid (PCI:0000:5c:00): 13, pid=2, Graphics Exception\n")
    assert xids.parse_xids(log) == [("PCI:0000:3b:00", 79), ("PCI:0000:5c:00", 13)]
    critical = thresholds.limits(None, None).critical_xids
    [failed] = xids.xid_checks(log, critical)
    assert failed.verdict == "fail" and "Xid 79 on PCI:0000:3b:00" in failed.reason
    assert xids.xid_checks(log.splitlines()[1], critical)[0].verdict == "warn"
    assert xids.xid_checks("", critical)[0].verdict == "pass"
    assert xids.xid_checks(None, critical)[0].verdict == "skip"
    assert xids.read_kmsg("/nonexistent/kmsg") is None


# --- stragglers ----------------------------------------------------------------------------

def test_one_slow_gpu_is_a_straggler_and_the_rest_pass() -> None:
    values = {gpu: 700.0 for gpu in range(8)} | {5: 600.0}
    found = results.stragglers("gemm", values, 0.10, "TFLOPS", "GEMM")
    assert [r.gpu for r in found if r.verdict == "fail"] == [5]
    assert results.stragglers("gemm", {gpu: 700.0 for gpu in range(8)} | {5: 640.0}, 0.10, "", "")[5].verdict == "pass"
    assert results.stragglers("gemm", {0: 10.0}, 0.10, "", "") == [], "one GPU has no peers"


def test_an_absolute_floor_fails_a_slow_gpu_and_is_skipped_where_unknown() -> None:
    assert results.against_floor("gemm", 0, 650.0, 692.3, "TFLOPS", "GEMM", "src").verdict == "fail"
    assert results.against_floor("gemm", 0, 700.0, 692.3, "TFLOPS", "GEMM", "src").verdict == "pass"
    relative = results.against_floor("gemm", 0, 1.0, None, "TFLOPS", "GEMM", "no peak")
    assert relative.verdict == "pass" and "only the comparison" in relative.reason


# --- the measurements, for real on the CPU -------------------------------------------------

def test_the_measurements_run_on_the_cpu_build_of_pytorch() -> None:
    cpu = torch.device("cpu")
    assert measure.gemm_tflops(torch, cpu, 64, 3, 1) > 0
    assert measure.copy_bandwidth_tbs(torch, cpu, 1 << 16, 3, 1) > 0
    outcome = measure.pattern_test(torch, cpu, 1 << 16, passes=1, chunk_bytes=1 << 14)
    assert outcome == {"mismatchedWords": 0, "bytesTested": 1 << 16}


def test_the_pattern_test_catches_memory_that_reads_back_wrong(monkeypatch: pytest.MonkeyPatch) -> None:
    original = torch.Tensor.fill_

    def stuck_bit(self: torch.Tensor, value: Any) -> torch.Tensor:
        filled = original(self, value)
        self[0] = 7  # one word that does not hold what was written
        return filled

    monkeypatch.setattr(torch.Tensor, "fill_", stuck_bit)
    outcome = measure.pattern_test(torch, torch.device("cpu"), 1 << 16, passes=2, chunk_bytes=1 << 14)
    assert outcome["mismatchedWords"] == 2 * len(measure.PATTERNS) * 4  # passes x patterns x chunks


def test_every_device_runs_at_once_and_a_failing_one_fails_alone() -> None:
    def measure_one(device: str) -> float:
        if device == "bad":
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return 1.0

    outcome = measure.on_every_gpu(["a", "bad", "c"], measure_one)
    assert outcome[0] == outcome[2] == 1.0 and isinstance(outcome[1], RuntimeError)
    judged = run._judged("gemm", ["a", "bad", "c"], outcome, None, "TFLOPS", "GEMM", "src", 0.10)
    assert [r.verdict for r in judged if r.gpu == 1] == ["fail"]


def test_a_hung_gpu_fails_after_the_phase_timeout() -> None:
    import threading

    release = threading.Event()

    def measure_one(device: str) -> float:
        if device == "hung":
            release.wait(5)
        return 1.0

    outcome = measure.on_every_gpu(["a", "hung"], measure_one, timeout_seconds=0.2)
    release.set()
    assert outcome[0] == 1.0 and isinstance(outcome[1], TimeoutError)


def test_the_index_pattern_catches_chunks_that_alias(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stuck address bit makes two chunks one memory: each reads back the other's indices."""
    real_empty = torch.empty
    shared: list[torch.Tensor] = []

    def aliasing_empty(*args: Any, **kwargs: Any) -> torch.Tensor:
        tensor = real_empty(*args, **kwargs)
        if kwargs.get("dtype") == torch.int32:
            if shared:
                return shared[0]  # the second chunk is the first one again
            shared.append(tensor)
        return tensor

    monkeypatch.setattr(torch, "empty", aliasing_empty)
    outcome = measure.pattern_test(torch, torch.device("cpu"), 1 << 16, passes=1, chunk_bytes=1 << 15)
    assert outcome["mismatchedWords"] > 0


def test_the_all_reduce_bus_bandwidth_runs_across_processes() -> None:
    assert interconnect.bus_bandwidth(100.0, 8) == pytest.approx(175.0)  # nccl-tests: algbw * 2(n-1)/n
    assert interconnect.allreduce_bus_bandwidth_gbs(2, 1 << 16, iters=3, warmup=1, backend="gloo") > 0


def test_infiniband_ports(tmp_path: Path) -> None:
    for device, state, physical, rate in (("mlx5_0", "4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)"),
                                          ("mlx5_1", "1: DOWN", "3: Disabled", "400 Gb/sec (4X NDR)"),
                                          ("mlx5_2", "4: ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)")):
        port = tmp_path / device / "ports" / "1"
        port.mkdir(parents=True)
        (port / "state").write_text(state + "\n")
        (port / "phys_state").write_text(physical + "\n")
        (port / "rate").write_text(rate + "\n")
    found = interconnect.infiniband_checks(tmp_path, 400.0)
    assert [r.verdict for r in found] == ["pass", "fail", "fail"]
    assert "rate 200 Gb/sec (4X HDR) below 400" in found[2].reason
    assert interconnect.infiniband_checks(tmp_path / "none", 400.0)[0].verdict == "fail"
    assert interconnect.infiniband_checks(tmp_path / "none", None)[0].verdict == "skip"


# --- a whole run, its report and metrics ---------------------------------------------------

def _cpu_node(states: list[GpuState], tmp_path: Path, **extra: Any) -> run.Node:
    return run.Node(FakeProbe(states), torch, [torch.device("cpu"), torch.device("cpu")], kernel_log="",
                    infiniband_sysfs=tmp_path / "no-ib", nccl_backend="gloo", **extra)


def test_a_standard_run_on_cpu_devices_passes_and_reports(tmp_path: Path) -> None:
    # A GPU model aksgpu has no floors for: only the relative checks judge the (tiny, CPU) measurements.
    states = [healthy(0, "Example GPU X1"), healthy(1, "Example GPU X1")]
    node_report = run.check_node(_cpu_node(states, tmp_path, expected_gpus=2), "standard", TINY)
    verdicts = {r.check: r.verdict for r in node_report.results if r.gpu in (None, 0)}
    assert {check: verdicts[check] for check in ("gemm", "memory-bandwidth", "memory-pattern", "nccl-allreduce")} == \
        dict.fromkeys(("gemm", "memory-bandwidth", "memory-pattern", "nccl-allreduce"), "pass")
    assert verdicts["gpu-model"] == "warn" and node_report.failures == [] or \
        {r.check for r in node_report.failures} <= {"gemm-straggler", "memory-bandwidth-straggler"}
    document = report.report_json(node_report)
    assert document["level"] == "standard" and set(document["gpus"]) == {"0", "1"}
    assert document["node"]["gpuModel"] is None


def test_an_h100_floor_fails_cpu_speed_measurements(tmp_path: Path) -> None:
    node_report = run.check_node(_cpu_node([healthy(0), healthy(1)], tmp_path, expected_gpus=2), "standard", TINY)
    failed = {r.check for r in node_report.failures}
    assert {"gemm", "memory-bandwidth"} <= failed <= {"gemm", "memory-bandwidth", "gemm-straggler",
                                                      "memory-bandwidth-straggler"}


def test_cuda_that_sees_fewer_gpus_than_nvml_fails_the_node(tmp_path: Path) -> None:
    node = run.Node(FakeProbe([healthy(0), healthy(1)]), torch, [], kernel_log="", infiniband_sysfs=tmp_path,
                    expected_gpus=2)
    node_report = run.check_node(node, "standard", TINY)
    assert node_report.failed_check == "cuda" and "PyTorch sees 0 CUDA devices and NVML 2 GPUs" in node_report.reason


def test_a_quick_run_measures_nothing(tmp_path: Path) -> None:
    node_report = run.check_node(_cpu_node([healthy(0)], tmp_path, expected_gpus=1), "quick")
    assert node_report.verdict == "pass" and not {"gemm", "memory-pattern"} & {r.check for r in node_report.results}
    assert "all" in node_report.reason and "passed (quick)" in node_report.reason


def test_the_report_names_the_failed_check_the_way_the_gate_reads_it(tmp_path: Path) -> None:
    bad = healthy(3)
    bad.volatile_uncorrected_ecc = 2
    node_report = run.check_node(_cpu_node([healthy(0), healthy(1), healthy(2), bad], tmp_path, expected_gpus=4),
                                 "quick")
    document = report.report_json(node_report)
    assert document["verdict"] == "fail" and document["failedCheck"] == "ecc-volatile-uncorrected"
    assert document["reason"].startswith("GPU 3: 2 uncorrected ECC errors")
    assert node_gate.failure_reason(1, document) == ("ecc-volatile-uncorrected", document["reason"])


def test_the_prometheus_file_parses_with_prometheus_client(tmp_path: Path) -> None:
    bad = healthy(1)
    bad.temperature_c = 90
    node_report = run.check_node(_cpu_node([healthy(0), bad], tmp_path, expected_gpus=2), "quick")
    node_report.results.append(results.CheckResult('odd "name"\\', "pass", "", None, 1.5, 1.0, "x"))
    text = report.prometheus_text(node_report, now=1_700_000_000.0)
    families = {family.name: family for family in text_string_to_metric_families(text)}
    passed = {(s.labels["check"], s.labels["gpu"]): s.value for s in families["aksgpu_gpu_check_passed"].samples}
    assert passed[("temperature", "1")] == 0 and passed[("temperature", "0")] == 1
    assert passed[('odd "name"\\', "node")] == 1, "label values are escaped"
    values = {(s.labels["check"], s.labels["gpu"]): s.value for s in families["aksgpu_gpu_check_value"].samples}
    assert values[("temperature", "1")] == 90
    [node] = families["aksgpu_gpu_check_node_passed"].samples
    assert node.value == 0 and node.labels == {"level": "quick"}
    assert families["aksgpu_gpu_check_last_run_timestamp_seconds"].samples[0].value == 1_700_000_000.0
    target = tmp_path / "textfile" / "aksgpu_gpu_check.prom"
    report.write_atomically(target, text)
    assert target.read_text() == text and not list(target.parent.glob(".*"))


def test_apply_verdict_admits_or_cordons_through_the_gate(api_server: tuple[str, FakeApi],  # noqa: F811
                                                          tmp_path: Path) -> None:
    url, state = api_server
    gate_taint = {"key": node_gate.GATE_TAINT_KEY, "value": "pending", "effect": "NoSchedule"}
    state.node = _node(2, {node_gate.HEALTH_LABEL: "pending"}, [GPU_TAINT, gate_taint])
    passed = run.check_node(_cpu_node([healthy(0)], tmp_path, expected_gpus=1), "quick")
    assert run.apply_verdict(passed, report.report_json(passed), "aks-h100-1", node_gate.Api(url, None, None)) == \
        "passed"
    assert state.node["spec"]["taints"] == [GPU_TAINT]
    bad = healthy(0)
    bad.remapping_failed = True
    failed = run.check_node(_cpu_node([bad], tmp_path, expected_gpus=1), "quick")
    assert run.apply_verdict(failed, report.report_json(failed), "aks-h100-1", node_gate.Api(url, None, None)) == \
        "failed"
    assert state.node["spec"]["unschedulable"] is True
    assert state.node["metadata"]["labels"][node_gate.FAILED_CHECK_LABEL] == "row-remap-failed"


def test_without_nvml_the_program_fails_the_node_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    target = tmp_path / "report.json"
    code = run.main(["--quick", "--report", str(target), "--kmsg", str(tmp_path / "none")])
    printed = json.loads(capsys.readouterr().out)
    assert code == 1 and printed["failedCheck"] == "driver" and "NVML or PyTorch did not start" in printed["reason"]
    assert json.loads(target.read_text())["verdict"] == "fail"
    assert run.main(["--apply-verdict", "--quick"]) == 2, "no NODE_NAME"


def test_the_vm_size_comes_from_azures_instance_metadata_service() -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    seen: list[str] = []

    class Imds(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            seen.append(self.headers.get("Metadata", ""))
            body = b"Standard_ND96isr_H100_v5"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = HTTPServer(("127.0.0.1", 0), Imds)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/metadata/instance/compute/vmSize"
        assert run.imds_vm_size(url) == "Standard_ND96isr_H100_v5" and seen == ["true"]
    finally:
        server.shutdown()
        server.server_close()
    assert run.imds_vm_size("http://127.0.0.1:9/none", timeout=0.5) is None


def _is_module(dotted: str) -> bool:
    path = Path(run.__file__).parents[4] / dotted.replace(".", "/")
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def test_the_image_carries_everything_the_check_imports() -> None:
    """The check runs in its own image (Dockerfile beside it), with the standard library, PyTorch,
    nvidia-ml-py and PyYAML: every module it (and node_gate.py) imports is one of those or a file
    the image copies, and it reads only data files the image copies."""
    import ast
    import re
    import sys

    package = Path(run.__file__).parent
    dockerfile = (package / "Dockerfile").read_text(encoding="utf-8")
    copied = {path for line in dockerfile.splitlines() if line.startswith("COPY ")
              for path in line.split()[1:-1]}
    copied_modules = {"aksgpu", "aksgpu.components", "aksgpu.components.data", "aksgpu.components.kubernetes",
                      "aksgpu.components.kubernetes.node_gate", "aksgpu.components.kubernetes.gpu_check"}
    copied_modules |= {f"aksgpu.components.kubernetes.gpu_check.{m.stem}" for m in package.glob("*.py")}
    assert {"aksgpu/components/kubernetes/gpu_check/*.py", "aksgpu/components/kubernetes/gpu_check/*.yaml",
            "aksgpu/components/kubernetes/node_gate.py", "aksgpu/components/data/vm_sizes.yaml",
            "aksgpu/components/data/gpu_alerts.yaml", "aksgpu/components/data/__init__.py"} <= copied
    for module in [*package.glob("*.py"), package.parent / "node_gate.py",
                   package.parent.parent / "data" / "__init__.py"]:
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                # `from package import module` imports the module too.
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names
                                         if _is_module(f"{node.module}.{alias.name}")]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top == "aksgpu":
                    assert name in copied_modules, (module.name, name)
                else:
                    assert top in sys.stdlib_module_names or top in {"torch", "pynvml", "yaml"}, (module.name, name)
    source = (package / "thresholds.py").read_text(encoding="utf-8")
    read = set(re.findall(r'"([a-z_]+\.yaml)"', source)) | {f"{name}.yaml" for name in
                                                           re.findall(r'data\.load\("([a-z_]+)"\)', source)}
    assert read == {"thresholds.yaml", "vm_sizes.yaml", "gpu_alerts.yaml"}
    assert "nvidia-ml-py" in dockerfile and "pyyaml" in dockerfile
