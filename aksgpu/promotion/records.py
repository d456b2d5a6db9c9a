"""Recorded verdicts as typed records: one per entry the gate wrote (node_verdicts.verdict_entry),
from the record ConfigMap's JSON lines, the gate's log lines (prefix "aksgpu-gpu-health", as
Container Insights keeps them) or a file of either. Absent keys are tolerated: entries written
before the evidence keys (zone, secondsToVerdict, fingerprint, measurements) parse with them empty."""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aksgpu.errors import Problem, UserError
from aksgpu.preflight.verdict_history import RECORD_KEY, entry_of

# The parts of a fingerprint that make a GPU stack: the kernel comes with the node image.
STACK_KEYS = ("nodeImage", "driver", "gpuOperator")
CHECK_SOURCES = ("gate", "recheck", "acceptance")  # the sources whose verdicts judge a node's GPUs
FINAL = ("passed", "failed", "held")  # "accepting": the local check passed, the cross-node acceptance is due


@dataclass(frozen=True)
class Measurements:
    """What the node's check measured (absent: None)."""

    gemm_tflops: float | None = None
    hbm_gbps: float | None = None  # GB/s, the check's device memory bandwidth
    nccl_busbw_gbps: float | None = None  # GB/s, the check's intra-node all-reduce
    cross_node_busbw_gbps: float | None = None  # GB/s, the cross-node acceptance's all-reduce (InfiniBand pools)


@dataclass(frozen=True)
class Verdict:
    """One recorded verdict."""

    time: datetime.datetime | None
    node: str
    pool: str
    vm_size: str
    source: str
    verdict: str
    check: str | None = None
    reason: str = ""
    zone: str | None = None
    seconds_to_verdict: int | None = None
    fingerprint: dict[str, str] = field(default_factory=dict)
    measurements: Measurements = Measurements()

    @property
    def stack(self) -> tuple[tuple[str, str], ...]:
        """The GPU stack the node ran: the fingerprint's nodeImage, driver and gpuOperator that are known."""
        return tuple((key, self.fingerprint[key]) for key in STACK_KEYS if key in self.fingerprint)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _time(text: Any) -> datetime.datetime | None:
    try:
        return datetime.datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    except ValueError:
        return None


def parse_entry(entry: dict[str, Any]) -> Verdict | None:
    """A record from one entry; None for an entry that names no node or verdict."""
    if not isinstance(entry.get("node"), str) or not isinstance(entry.get("verdict"), str):
        return None
    raw_fingerprint = entry.get("fingerprint")
    raw_measured = entry.get("measurements")
    measured = raw_measured if isinstance(raw_measured, dict) else {}
    seconds = entry.get("secondsToVerdict")
    return Verdict(
        time=_time(entry.get("time")), node=entry["node"], pool=str(entry.get("pool") or ""),
        vm_size=str(entry.get("vmSize") or ""), source=str(entry.get("source") or ""), verdict=entry["verdict"],
        check=entry.get("check") if isinstance(entry.get("check"), str) else None,
        reason=str(entry.get("reason") or ""),
        zone=entry.get("zone") if isinstance(entry.get("zone"), str) else None,
        seconds_to_verdict=int(seconds) if isinstance(seconds, (int, float)) and not isinstance(seconds, bool)
        else None,
        fingerprint={str(k): str(v) for k, v in raw_fingerprint.items()} if isinstance(raw_fingerprint, dict) else {},
        measurements=Measurements(_number(measured.get("gemmTflopsMedian")),
                                  _number(measured.get("hbmBandwidthGbpsMedian")),
                                  _number(measured.get("ncclBusBwGbps")),
                                  _number(measured.get("crossNodeBusBwGbps"))))


def parse_lines(lines: Iterable[str | dict[str, Any]]) -> list[Verdict]:
    """Records from JSON lines, each bare or after the gate's log prefix (and whatever a log
    collector put before it), or from entries and export rows already parsed; what is not an entry
    is skipped."""
    # One reader of the entry formats: the capacity history's (aksgpu/preflight/verdict_history.py).
    entries = (entry_of(line) for line in lines)
    return [record for record in (parse_entry(entry) for entry in entries if entry is not None)
            if record is not None]


def parse_configmap(configmap: dict[str, Any]) -> list[Verdict]:
    """Records from the record ConfigMap (aksgpu-gpu-health-record, key "verdicts")."""
    return parse_lines(str((configmap.get("data") or {}).get(RECORD_KEY) or "").splitlines())


def read_file(path: Path) -> list[Verdict]:
    """Records from a file: JSON lines (record entries or log lines), a JSON list of entries, or a
    record ConfigMap as JSON (`kubectl get configmap aksgpu-gpu-health-record -o json`)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise UserError(f"cannot read the verdicts file {path}: {error.strerror or error}. Fix: give the path "
                        "of a file of verdict entries (JSON lines, as the record ConfigMap holds them)") from None
    try:
        document = json.loads(text)
    except ValueError:
        document = None
    if isinstance(document, dict) and document.get("kind") == "ConfigMap":
        records = parse_configmap(document)
    elif isinstance(document, list):  # entries, or the rows `az monitor log-analytics query` prints
        records = parse_lines(document)
    else:
        records = parse_lines(text.splitlines())
    if not records:
        raise UserError(problems=[Problem(
            "--verdicts", str(path), "the file holds verdict entries (with at least node and verdict)",
            "export the record with `kubectl get configmap aksgpu-gpu-health-record -n aksgpu-system -o json`, "
            "or give JSON lines of entries")])
    return records
