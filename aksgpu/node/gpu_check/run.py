"""Run the GPU health check: `python -m aksgpu.node.gpu_check [--quick | --full]`.

Levels: --quick is inventory and error state through NVML (under a second); the standard level
adds the GEMM, memory bandwidth, memory pattern and interconnect checks (1.5-2.9 s of checks on one
H100; an 8-GPU node was not measured); --full repeats them longer and larger (a five-minute burn).
Each measurement phase stops after its limit (thresholds.yaml phaseLimitsSeconds: the standard
level's add up to under 60 s with the program's start, on any number of GPUs, since every phase
runs on all GPUs at once) and fails the GPU it waited for. Exit codes (the gate's contract,
node_gate.py): 0 the node passed (warnings included), 1 a check failed, 2 the check could not run
(bad arguments). --report writes the JSON report; --prometheus writes the results in Prometheus'
text format, for a node exporter's textfile collector of your own (aksgpu deploys none and
reads nothing from that file); --apply-verdict also applies the gate's verdict to this node
(remove the startup taint on a pass; cordon, label and annotate on a failure) with the pod's
service account. --mode gate or recheck ($AKSGPU_MODE, set by the gate) makes an unreadable
kernel log a failure instead of a skip.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aksgpu.node.gpu_check import interconnect, measure, probe, report, results, thresholds, xids
from aksgpu.node.gpu_check.results import CheckResult, NodeReport

# The host's log folder as the gate mounts it (gpu_gate.py HOST_LOG_DIR): the node's /var/log, read-only.
HOST_LOG_DIR = "/host/var/log"


@dataclass
class Node:
    """What the check runs against: tests pass fakes (a probe, CPU devices, a kernel log, a sysfs tree)."""

    probe: probe.Probe
    torch: Any | None = None
    devices: list[Any] = field(default_factory=list)
    kernel_log: xids.KernelLog = field(default_factory=lambda: xids.KernelLog.of(""))
    infiniband_sysfs: Path = Path("/sys/class/infiniband")
    # Where the RDMA shared device plugin puts the verbs devices, and which HCA each serves.
    rdma_dev: Path = Path("/dev/infiniband")
    verbs_sysfs: Path = Path("/sys/class/infiniband_verbs")
    vm_size: str | None = None
    expected_gpus: int | None = None
    expected_model: str | None = None
    nccl_backend: str = "nccl"
    # A device's memory as the pattern test sees it (measure.TorchMemory); tests pass a busy device.
    memory: Callable[[Any], Any] | None = None
    # The gate and its re-checks: no readable kernel log fails the xid check instead of skipping it.
    kernel_log_required: bool = False


def check_node(node: Node, level: str, sizes: measure.Sizes | None = None,
               phases: thresholds.PhaseLimits | None = None) -> NodeReport:
    """Every check of `level` on `node`, in order: inventory and error state first (cheap, and a GPU
    that fails them is not worth timing), then compute, memory and interconnect, each phase within
    its limit (thresholds.yaml phaseLimitsSeconds for the level unless `phases` is given)."""
    begin = time.monotonic()
    driver = node.probe.driver_version()
    states = node.probe.gpus()
    model = thresholds.model_of(states[0].name) if states else None
    limits = thresholds.limits(model, node.vm_size)
    found = probe.inventory_checks(states, limits, driver, node.expected_gpus, node.expected_model)
    found += probe.error_checks(states, limits)
    found += xids.xid_checks(node.kernel_log, limits.critical_xids, node.kernel_log_required)
    if level != "quick":
        if len(node.devices) != len(states) or node.torch is None:
            # CUDA that cannot start (a driver older than the image's CUDA, no /dev/nvidia*) would
            # otherwise skip every measurement and pass the node on NVML alone.
            found.append(CheckResult("cuda", "fail", f"PyTorch sees {len(node.devices)} CUDA devices and NVML "
                                     f"{len(states)} GPUs", value=len(node.devices), threshold=len(states)))
        else:
            sizes = sizes or (measure.FULL if level == "full" else measure.STANDARD)
            found += _performance(node, limits, sizes, phases or thresholds.phase_limits(
                "full" if level == "full" else "standard"))
    found += interconnect.infiniband_checks(node.infiniband_sysfs, limits.infiniband_gbps, limits.infiniband_hcas)
    found += interconnect.rdma_device_checks(node.infiniband_sysfs, node.rdma_dev, node.verbs_sysfs,
                                             limits.infiniband_hcas)
    facts = {"vmSize": node.vm_size, "gpuModel": model, "driver": driver, "gpus": len(states),
             "gpuNames": sorted({s.name for s in states})}
    return NodeReport(level, found, time.monotonic() - begin, facts)


def _performance(node: Node, limits: thresholds.Limits, sizes: measure.Sizes,
                 phases: thresholds.PhaseLimits) -> list[CheckResult]:
    torch, devices = node.torch, node.devices
    found: list[CheckResult] = []
    tflops = measure.on_every_gpu(devices, lambda d: measure.gemm_tflops(
        torch, d, sizes.gemm_n, sizes.gemm_iters, sizes.warmup, sizes.burn_seconds), sizes.burn_seconds + phases.gemm)
    found += _judged("gemm", devices, tflops, limits.tflops_floor, "TFLOPS", "dense matrix multiply",
                     limits.tflops_source, limits.straggler_tolerance)
    bandwidth = measure.on_every_gpu(devices, lambda d: measure.copy_bandwidth_tbs(
        torch, d, sizes.copy_bytes, sizes.copy_iters, sizes.warmup), phases.copy)
    found += _judged("memory-bandwidth", devices, bandwidth, limits.bandwidth_floor_tbs, "TB/s",
                     "device copy bandwidth", limits.bandwidth_source, limits.straggler_tolerance)

    def pattern(device: Any) -> measure.PatternOutcome:
        memory = node.memory(device) if node.memory else measure.TorchMemory(torch, device)
        begun = memory.free_and_total()
        nbytes = int(begun[0] * sizes.pattern_fraction) if begun else sizes.copy_bytes
        return measure.pattern_test(torch, device, nbytes, sizes.pattern_passes,
                                    headroom_bytes=limits.pattern_headroom_bytes, memory=memory)

    for position, outcome in sorted(measure.on_every_gpu(devices, pattern, phases.pattern).items()):
        found.append(pattern_result(_index(devices[position], position), outcome, limits.pattern_min_coverage,
                                    torch))
    if len(devices) > 1:
        if all(d.type == "cuda" for d in devices):
            peers = measure.on_every_gpu(["p2p"], lambda _: interconnect.peer_checks(torch, devices), phases.p2p)[0]
            found += peers if isinstance(peers, list) else [
                CheckResult("p2p", "fail", f"the peer-to-peer checks could not run: {peers}")]
        try:
            message = limits.nccl_message_bytes if all(d.type == "cuda" for d in devices) else None
            busbw = interconnect.allreduce_bus_bandwidth_gbs(len(devices), message or sizes.copy_bytes // 2,
                                                              backend=node.nccl_backend,
                                                              timeout_seconds=phases.allreduce)
            found.append(results.against_floor("nccl-allreduce", None, busbw, limits.nccl_floor_gbs, "GB/s",
                                               "all-reduce bus bandwidth", limits.nccl_source))
        except Exception as error:  # noqa: BLE001 - NCCL that cannot run fails the node
            found.append(CheckResult("nccl-allreduce", "fail", f"the all-reduce could not run: {error}"))
    return found


def pattern_result(gpu: int, outcome: measure.PatternOutcome | BaseException, min_coverage: float,
                   torch: Any = None) -> CheckResult:
    """The memory-pattern verdict of one GPU: words that read back wrong fail it; a GPU other processes
    leave too little free memory on (under `min_coverage` of its total tested), or one whose test broke
    off for memory, warns with the figures: busy is not broken. An out-of-memory error is never a failure."""
    if isinstance(outcome, BaseException):
        if torch is not None and measure.is_out_of_memory(torch, outcome):
            return CheckResult("memory-pattern", "warn", f"the pattern test found too little free memory to run: "
                               f"{outcome}", gpu)
        return CheckResult("memory-pattern", "fail", f"the pattern test could not run: {outcome}", gpu)
    gib = 2**30
    figures = {"bytesTested": outcome.bytes_tested, "bytesAsked": outcome.bytes_asked}
    if outcome.free_bytes is not None and outcome.total_bytes:
        figures |= {"freeBytes": outcome.free_bytes, "totalBytes": outcome.total_bytes}
    tested = f"{outcome.bytes_tested / gib:.2f} GiB"
    if outcome.mismatched_words:
        return CheckResult("memory-pattern", "fail", f"{outcome.mismatched_words} words read back wrong over {tested}",
                           gpu, outcome.mismatched_words, 0, "words", figures)
    memory = (f" ({outcome.free_bytes / gib:.2f} GiB of {outcome.total_bytes / gib:.2f} GiB free when it began)"
              if outcome.free_bytes is not None and outcome.total_bytes else "")
    stopped = f"; {outcome.stopped}" if outcome.stopped else ""
    coverage = outcome.bytes_tested / outcome.total_bytes if outcome.total_bytes else None
    if coverage is not None and coverage < min_coverage:
        return CheckResult("memory-pattern", "warn", f"0 words read back wrong, but only {tested} tested, "
                           f"{coverage:.0%} of the GPU's memory (below {min_coverage:.0%}){memory}: other processes "
                           f"hold the rest, which was not tested{stopped}", gpu, 0, 0, "words",
                           figures | {"coverage": coverage})
    if outcome.stopped and outcome.stopped.startswith("broke off"):
        return CheckResult("memory-pattern", "warn", f"0 words read back wrong over {tested}{memory}, but the test "
                           f"{outcome.stopped}", gpu, 0, 0, "words", figures)
    return CheckResult("memory-pattern", "pass", f"0 words read back wrong over {tested}{memory}{stopped}", gpu, 0, 0,
                       "words", figures)


def _index(device: Any, position: int) -> int:
    """A CUDA device's own index; its position in the list for others (the CPU devices of the tests)."""
    index = getattr(device, "index", None)
    return index if isinstance(index, int) else position


def _judged(check: str, devices: list[Any], outcomes: dict[int, Any], floor: float | None, unit: str, what: str,
            source: str, tolerance: float) -> list[CheckResult]:
    values: dict[int, float] = {}
    found = []
    for position, outcome in sorted(outcomes.items()):
        gpu = _index(devices[position], position)
        if isinstance(outcome, BaseException):
            found.append(CheckResult(check, "fail", f"the {what} could not run: {outcome}", gpu))
            continue
        values[gpu] = float(outcome)
        found.append(results.against_floor(check, gpu, values[gpu], floor, unit, what, source))
    return found + results.stragglers(check, values, tolerance, unit, what)


# Azure's Instance Metadata Service, which every Azure VM (and its pods, unless a network policy
# blocks it) can ask for its own size (learn.microsoft.com/azure/virtual-machines/instance-metadata-service).
IMDS_VM_SIZE = "http://169.254.169.254/metadata/instance/compute/vmSize?api-version=2021-02-01&format=text"


def imds_vm_size(url: str | None = None, timeout: float = 2.0) -> str | None:
    """This VM's size from the Instance Metadata Service, or None where it does not answer."""
    import urllib.request

    request = urllib.request.Request(url or os.environ.get("AKSGPU_IMDS_URL", IMDS_VM_SIZE),
                                     headers={"Metadata": "true"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            size = response.read().decode().strip()
    except OSError:
        return None
    return size or None


def _real_node(args: argparse.Namespace) -> Node:
    real = probe.NvmlProbe()
    torch = None if args.quick else measure.torch_module()
    return Node(real, torch, measure.gpu_devices(torch) if torch is not None else [],
                xids.read_kernel_log(args.kmsg, Path(args.host_log_dir)), Path(args.infiniband_sysfs),
                vm_size=args.vm_size or imds_vm_size(), expected_gpus=args.expect_gpus,
                expected_model=args.expect_model, rdma_dev=Path(args.rdma_dev), verbs_sysfs=Path(args.verbs_sysfs),
                kernel_log_required=args.mode in xids.MODES_THAT_NEED_THE_LOG)


def apply_verdict(node_report: NodeReport, document: dict[str, Any], node_name: str, api: Any = None) -> str:
    """The gate's node actions (node_gate.verdict) on this node, from this run's result: "passed"
    (startup taint removed) or "failed" (cordoned, labelled with the failed check, annotated). A
    node the gate holds pending gets the gate's verdict, any other a re-check's (its taints stay)."""
    from aksgpu.node import node_api, node_gate

    api = api or node_api.Api.in_cluster()
    labels = api.get_node(node_name).get("metadata", {}).get("labels") or {}
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, node_gate.EXIT_CODE_FILE).write_text("0" if node_report.verdict == "pass" else "1")
        Path(folder, node_gate.REPORT_FILE).write_text(json.dumps(document))
        return node_gate.verdict(api, node_name, folder, recheck=labels.get(node_api.HEALTH_LABEL) != "pending")


def parser() -> argparse.ArgumentParser:
    cli = argparse.ArgumentParser(prog="gpu_check", description=__doc__.split("\n\n")[0])
    level = cli.add_mutually_exclusive_group()
    level.add_argument("--quick", action="store_true", help="inventory and error state only (seconds)")
    level.add_argument("--full", action="store_true", help="longer, larger measurements (a burn of minutes)")
    cli.add_argument("--vm-size", default=os.environ.get("AKSGPU_VM_SIZE"),
                     help="this node's VM size (default: $AKSGPU_VM_SIZE, else Azure's Instance Metadata Service)")
    cli.add_argument("--expect-gpus", type=int, help="GPUs the node must have (default: the VM size's)")
    cli.add_argument("--expect-model", help="the GPU model every GPU must be (a model of aksgpu's catalog)")
    cli.add_argument("--report", default=os.environ.get("AKSGPU_REPORT"), help="write the JSON report here")
    cli.add_argument("--prometheus", help="also write the results in Prometheus' text format here, for a node "
                     "exporter's textfile collector you run yourself: aksgpu deploys no collector and reads nothing "
                     "from this file (the gate reads the exit code and the JSON report)")
    cli.add_argument("--kmsg", default="/dev/kmsg", help="the kernel's log device, read for Xid events where the "
                     "check may open it (a privileged container)")
    cli.add_argument("--host-log-dir", default=os.environ.get("AKSGPU_HOST_LOG_DIR", HOST_LOG_DIR),
                     help="the node's /var/log mounted read-only, read for Xid events when the kernel log device is "
                     f"not readable (default: $AKSGPU_HOST_LOG_DIR, else {HOST_LOG_DIR})")
    cli.add_argument("--mode", default=os.environ.get("AKSGPU_MODE", ""),
                     help="gate or recheck (default: $AKSGPU_MODE, which the gate sets): a kernel log that cannot be "
                     "read then fails the xid check instead of skipping it")
    cli.add_argument("--infiniband-sysfs", default="/sys/class/infiniband")
    cli.add_argument("--rdma-dev", default="/dev/infiniband",
                     help="where the RDMA devices appear in this container (InfiniBand sizes: the pod requests the "
                     "RDMA resource, and its device plugin mounts them here)")
    cli.add_argument("--verbs-sysfs", default="/sys/class/infiniband_verbs")
    cli.add_argument("--apply-verdict", action="store_true",
                     help="apply the gate's verdict to $NODE_NAME with the pod's service account")
    return cli


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.apply_verdict and not os.environ.get("NODE_NAME"):
        print("gpu_check: --apply-verdict needs NODE_NAME (the downward API's spec.nodeName)", file=sys.stderr)
        return 2
    level = "quick" if args.quick else "full" if args.full else "standard"
    try:
        node = _real_node(args)
    except Exception as error:  # noqa: BLE001 - no NVML or no PyTorch: the node cannot be judged healthy
        node_report = NodeReport(level, [CheckResult("driver", "fail", f"NVML or PyTorch did not start: {error}")], 0.0)
    else:
        try:
            node_report = check_node(node, level)
        except Exception as error:  # noqa: BLE001 - e.g. NVML's GPU-is-lost: fail with a report, not a traceback
            node_report = NodeReport(level, [CheckResult("nvml", "fail", f"the check broke off: "
                                                         f"{type(error).__name__}: {error}")], 0.0)
    document = report.report_json(node_report)
    if args.report:
        report.write_atomically(Path(args.report), json.dumps(document, indent=2) + "\n")
    if args.prometheus:
        report.write_atomically(Path(args.prometheus), report.prometheus_text(node_report))
    print(json.dumps({key: document[key] for key in ("verdict", "failedCheck", "reason", "durationSeconds")}))
    if args.apply_verdict:
        apply_verdict(node_report, document, os.environ["NODE_NAME"])
    return 0 if node_report.verdict == "pass" else 1
