"""Results of the checks and the node's verdict."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Verdict = Literal["pass", "fail", "warn", "skip"]


@dataclass
class CheckResult:
    """One check on one GPU (gpu None: the node as a whole)."""

    check: str
    verdict: Verdict
    reason: str
    gpu: int | None = None
    value: float | None = None
    threshold: float | None = None
    unit: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {key: value for key, value in asdict(self).items() if value not in (None, {}, "")}


@dataclass
class NodeReport:
    """Every result of one run, and what they add up to: the node fails on any failed check and
    passes otherwise. A warning (a busy GPU's partial memory test, a non-critical Xid) passes: the
    gate's contract is the exit code, 0 for a pass (node_gate.py), and the report lists the warnings."""

    level: str
    results: list[CheckResult]
    duration_seconds: float
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def failures(self) -> list[CheckResult]:
        return [r for r in self.results if r.verdict == "fail"]

    @property
    def warnings(self) -> list[CheckResult]:
        return [r for r in self.results if r.verdict == "warn"]

    @property
    def verdict(self) -> Verdict:
        return "fail" if self.failures else "pass"

    @property
    def failed_check(self) -> str | None:
        """The first failed check's name: the gate copies it into the node's label."""
        return self.failures[0].check if self.failures else None

    @property
    def reason(self) -> str:
        if not self.failures:
            ran = len([r for r in self.results if r.verdict != 'skip'])
            if not self.warnings:
                return f"all {ran} checks passed ({self.level})"
            first = self.warnings[0]
            checks = ", ".join(dict.fromkeys(r.check for r in self.warnings))
            where = f"GPU {first.gpu} " if first.gpu is not None else ""
            return (f"none of {ran} checks failed ({self.level}); {len(self.warnings)} warned ({checks}); "
                    f"{where}{first.check}: {first.reason}")
        first = self.failures[0]
        where = f"GPU {first.gpu}: " if first.gpu is not None else ""
        more = f" (and {len(self.failures) - 1} more failures)" if len(self.failures) > 1 else ""
        return f"{where}{first.reason}{more}"


def against_floor(check: str, gpu: int | None, value: float, floor: float | None, unit: str,
                  what: str, source: str) -> CheckResult:
    """pass when value >= floor. Where no floor is known it passes and says so: the comparison with
    the node's other GPUs (stragglers) is then the only judgement."""
    if floor is None:
        return CheckResult(check, "pass", f"{what} {value:.4g} {unit}; no absolute floor for this GPU ({source}), "
                           "so only the comparison with the node's other GPUs applies", gpu, value, None, unit)
    if value >= floor:
        return CheckResult(check, "pass", f"{what} {value:.4g} {unit} >= {floor:.4g} ({source})",
                           gpu, value, floor, unit)
    return CheckResult(check, "fail", f"{what} {value:.4g} {unit} is below {floor:.4g} ({source})",
                       gpu, value, floor, unit)


def stragglers(check: str, values: dict[int, float], tolerance: float, unit: str, what: str) -> list[CheckResult]:
    """GPUs more than `tolerance` below the node's median: one slow GPU slows a whole synchronous job.
    A node with one GPU has no peer to compare with."""
    if len(values) < 2:
        return []
    median = statistics.median(values.values())
    floor = median * (1 - tolerance)
    results = []
    for gpu, value in sorted(values.items()):
        if value < floor:
            results.append(CheckResult(f"{check}-straggler", "fail",
                                       f"{what} {value:.4g} {unit} is more than {tolerance:.0%} below the node's "
                                       f"median {median:.4g}", gpu, value, floor, unit))
        else:
            results.append(CheckResult(f"{check}-straggler", "pass", f"{what} within {tolerance:.0%} of the node's "
                                       f"median {median:.4g} {unit}", gpu, value, floor, unit))
    return results
