"""What a run leaves behind: the JSON report (the gate reads failedCheck and reason from it) and, on
request, the same results in Prometheus' text format for a node exporter's textfile collector the
user runs: aksgpu deploys no such collector and nothing of aksgpu reads that file."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from collections.abc import Mapping
from typing import Any

from aksgpu.node.gpu_check.results import NodeReport


def report_json(report: NodeReport) -> dict[str, Any]:
    gpus: dict[str, dict[str, Any]] = {}
    for result in report.results:
        if result.gpu is None:
            continue
        entry = gpus.setdefault(str(result.gpu), {"verdict": "pass", "checks": []})
        entry["checks"].append(result.to_json())
        if result.verdict == "fail" or (result.verdict == "warn" and entry["verdict"] == "pass"):
            entry["verdict"] = result.verdict
    return {
        "verdict": report.verdict,
        "failedCheck": report.failed_check,
        "reason": report.reason,
        "warnings": [{"check": r.check, "gpu": r.gpu, "reason": r.reason} if r.gpu is not None
                     else {"check": r.check, "reason": r.reason} for r in report.warnings],
        "level": report.level,
        "durationSeconds": round(report.duration_seconds, 2),
        "node": report.facts,
        "gpus": dict(sorted(gpus.items(), key=lambda item: int(item[0]))),
        "nodeChecks": [r.to_json() for r in report.results if r.gpu is None],
    }


def _label(value: object) -> str:
    """A label value in Prometheus' text format: backslash, double quote and newline escaped."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs: Mapping[str, object]) -> str:
    return "{" + ",".join(f'{key}="{_label(value)}"' for key, value in pairs.items()) + "}"


def prometheus_text(report: NodeReport, now: float | None = None) -> str:
    """The metrics of one run, in Prometheus' text exposition format (version 0.0.4), for a textfile
    collector of the user's own (aksgpu collects none of it)."""
    lines = [
        "# HELP aksgpu_gpu_check_passed 1 when the check passed (warnings included), 0 when it failed.",
        "# TYPE aksgpu_gpu_check_passed gauge",
    ]
    measured = []
    for result in report.results:
        if result.verdict == "skip":
            continue
        labels = {"check": result.check, "gpu": "node" if result.gpu is None else result.gpu}
        lines.append(f"aksgpu_gpu_check_passed{_labels(labels)} {0 if result.verdict == 'fail' else 1}")
        if result.value is not None:
            measured.append((labels | {"unit": result.unit}, result.value, result.threshold))
    lines += ["# HELP aksgpu_gpu_check_value The value the check measured, in its unit.",
              "# TYPE aksgpu_gpu_check_value gauge"]
    lines += [f"aksgpu_gpu_check_value{_labels(labels)} {value:g}" for labels, value, _ in measured]
    lines += ["# HELP aksgpu_gpu_check_threshold The threshold the value was held to.",
              "# TYPE aksgpu_gpu_check_threshold gauge"]
    lines += [f"aksgpu_gpu_check_threshold{_labels(labels)} {threshold:g}" for labels, _, threshold in measured
              if threshold is not None]
    lines += [
        "# HELP aksgpu_gpu_check_node_passed 1 when every check on the node passed.",
        "# TYPE aksgpu_gpu_check_node_passed gauge",
        f"aksgpu_gpu_check_node_passed{_labels({'level': report.level})} {1 if report.verdict == 'pass' else 0}",
        "# HELP aksgpu_gpu_check_duration_seconds How long the run took.",
        "# TYPE aksgpu_gpu_check_duration_seconds gauge",
        f"aksgpu_gpu_check_duration_seconds {report.duration_seconds:.3f}",
        "# HELP aksgpu_gpu_check_last_run_timestamp_seconds When the run ended, Unix time.",
        "# TYPE aksgpu_gpu_check_last_run_timestamp_seconds gauge",
        f"aksgpu_gpu_check_last_run_timestamp_seconds {time.time() if now is None else now:.3f}",
    ]
    return "\n".join(lines) + "\n"


def write_atomically(path: Path, text: str) -> None:
    """Write whole or not at all: a reader (the gate's verdict step, a textfile collector) must never
    read half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
