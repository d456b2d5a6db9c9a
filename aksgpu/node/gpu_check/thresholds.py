"""The limits of the GPU health check: thresholds.yaml beside this file, and the peaks, the alert
rules' fatal Xids and the InfiniBand HCAs from aksgpu's data tables (catalog, read through
its loader; the image copies them)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from aksgpu import catalog as tables

HERE = Path(__file__).resolve().parent


@functools.cache
def table() -> dict[str, Any]:
    with (HERE / "thresholds.yaml").open(encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def infiniband_hcas(vm_size: str | None) -> int | None:
    """How many InfiniBand HCAs the VM size has (data/fabric.yaml, the table behind
    aksgpu.spec.fabric.fabric_profile, whose hcas the RDMA shared device plugin hands a pod),
    or None for a size without InfiniBand or not in the table. Read from the table itself: the image
    carries the data tables, not the spec package."""
    for family in tables.load("fabric")["families"].values():
        if vm_size in family["sizes"]:
            return len(family["hcas"])
    return None


def alert_xids() -> frozenset[int]:
    """The fatal Xids of aksgpu's alert rules (data/gpu_alerts.yaml)."""
    return frozenset(tables.load("gpu_alerts")["nodeXids"])


def _words(name: str) -> list[str]:
    return [word for word in re.split(r"[\s-]+", name.upper()) if word]


def _holds(name: list[str], words: list[str]) -> bool:
    return any(name[start:start + len(words)] == words for start in range(len(name) - len(words) + 1))


def model_of(nvml_name: str) -> str | None:
    """The catalog's GPU model for an NVML device name, or None for a GPU aksgpu does not know."""
    name = _words(nvml_name)
    if any(_holds(name, _words(unknown)) for unknown in table()["unknownNames"]):
        return None
    for model, names in table()["nvmlNames"].items():
        if any(_holds(name, _words(listed)) for listed in names):
            return model
    return None


@dataclass(frozen=True)
class Limits:
    """What one GPU model on one VM size must reach; None: no absolute floor (relative checks only)."""

    model: str | None
    tflops_floor: float | None
    tflops_source: str
    bandwidth_floor_tbs: float | None
    bandwidth_source: str
    nccl_floor_gbs: float | None
    nccl_message_bytes: int | None
    nccl_source: str
    straggler_tolerance: float
    temperature_margin_c: float
    critical_xids: frozenset[int]
    expected_gpus: int | None
    infiniband_gbps: float | None
    infiniband_hcas: int | None = None
    pattern_headroom_bytes: int = 1 << 30
    pattern_min_coverage: float = 0.5


def limits(model: str | None, vm_size: str | None) -> Limits:
    thresholds = table()
    facts = tables.gpu_model(model or "")
    size = tables.vm_size(vm_size or "")
    peak = facts.peak_tflops if facts else None
    memory_tbs = facts.memory_bandwidth_tbs if facts else None
    compute = thresholds["computeFraction"].get(model or "")
    bandwidth = thresholds["bandwidthFraction"].get(model or "")
    nccl = thresholds["ncclBusBandwidth"].get(vm_size or "")
    ib = size.infiniband if size else None
    return Limits(
        model=model,
        tflops_floor=round(peak * compute["value"], 1) if peak and compute else None,
        tflops_source=(f"{compute['value']:.0%} of {model}'s {peak} TFLOPS dense peak ({compute['source']}; peak: "
                       f"{facts.peak_source if facts else ''})") if peak and compute
        else "no peak or fraction for this GPU",
        bandwidth_floor_tbs=round(memory_tbs * bandwidth["value"], 3) if memory_tbs and bandwidth else None,
        bandwidth_source=(f"{bandwidth['value']:.0%} of {model}'s {memory_tbs} TB/s "
                          f"({bandwidth['source']})") if memory_tbs and bandwidth
        else "no bandwidth floor for this GPU",
        nccl_floor_gbs=nccl["value"] if nccl else None,
        nccl_message_bytes=nccl["messageBytes"] if nccl else None,
        nccl_source=(f"Azure's node health checks' floor for {vm_size} at {nccl['messageBytes'] >> 30} GiB "
                     f"({thresholds['source'][nccl['source']].split(':')[0]})") if nccl
        else "no NCCL floor for this VM size",
        straggler_tolerance=thresholds["stragglerTolerance"]["value"],
        temperature_margin_c=thresholds["temperatureMarginC"]["value"],
        critical_xids=alert_xids() | frozenset(thresholds["extraCriticalXids"]["values"]),
        expected_gpus=(size.gpus or None) if size else None,
        infiniband_gbps=float(ib.split()[0]) if ib else None,
        infiniband_hcas=infiniband_hcas(vm_size),
        pattern_headroom_bytes=int(thresholds["memoryPattern"]["headroomGib"]["value"] * 2**30),
        pattern_min_coverage=thresholds["memoryPattern"]["minCoverage"]["value"],
    )


@dataclass(frozen=True)
class PhaseLimits:
    """Seconds each measurement phase may take before what it waited for counts as hung."""

    gemm: float
    copy: float
    pattern: float
    p2p: float
    allreduce: float

    @property
    def total(self) -> float:
        return self.gemm + self.copy + self.pattern + self.p2p + self.allreduce


def phase_limits(level: str) -> PhaseLimits:
    """The phase limits of a level ("standard" or "full"; quick measures nothing)."""
    return PhaseLimits(**{name: float(value) for name, value in table()["phaseLimitsSeconds"][level].items()})


@dataclass(frozen=True)
class KernelLogFiles:
    """Where the node's text logs hold kernel messages (thresholds.yaml kernelLog)."""

    files: tuple[str, ...]
    journal_dir: str
    max_bytes_per_file: int
    boot_slack_seconds: float


def kernel_log_files() -> KernelLogFiles:
    entry = table()["kernelLog"]
    return KernelLogFiles(tuple(entry["files"]), entry["journalDir"], int(entry["maxBytesPerFile"]),
                          float(entry["bootSlackSeconds"]))
