"""The promotion decision: a pure function over recorded verdicts (records.py).

Given the canary pool's verdicts on the candidate stack and the baseline's verdicts (the same VM
size on the stack the other pools are pinned to), decide:

- rollback: the canary is failing: the gate's circuit breaker held a canary node (its own rule
  for a systemic failure: a broken image or driver), or at least `rollback_failures` canary nodes
  failed and they are more than half of the canary's nodes. Failures need no quorum: a broken
  driver shows on the first nodes.
- wait: fewer than `min_canary_nodes` canary nodes have a final verdict, or a measurement the
  rules compare is missing on a passed canary node, or on every baseline node (named in `missing`).
- refuse: the canary's pass rate is below `min_pass_rate`; its GEMM or memory-bandwidth median
  (over nodes, each node's value a median over its GPUs) is more than the tolerance below the
  baseline's; or, where a floor is set, a canary node's NCCL bus bandwidth is below it: the
  cross-node figure (the acceptance's all-reduce between nodes) where the canary's pool runs the
  cross-node acceptance (InfiniBand pools), else the intra-node one (the gate check's all-reduce).
- promote: none of the above.

A node's figures are the newest of each over its check verdicts on the candidate: on an InfiniBand
pool its final verdict is the acceptance's, which carries the cross-node figure only, and the GEMM,
memory-bandwidth and intra-node figures are those of its gate verdict before ("accepting").

Each outcome carries its reasons and the figures behind them (`evidence`)."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from aksgpu.preflight.verdict_history import WATCHDOG_FAILURES
from aksgpu.promotion.records import CHECK_SOURCES, FINAL, Measurements, Verdict

Action = Literal["promote", "wait", "refuse", "rollback"]
Stack = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Rules:
    """The spec's promotion section (aksgpu/spec/promotion.py), as the decision reads it."""

    min_canary_nodes: int = 3
    min_pass_rate: float = 0.9
    gemm_tolerance: float = 0.05
    bandwidth_tolerance: float = 0.05
    nccl_floor_gbps: float | None = None
    rollback_failures: int = 2


@dataclass(frozen=True)
class Decision:
    action: Action
    reasons: tuple[str, ...]
    candidate: Stack = ()
    missing: tuple[str, ...] = ()
    evidence: dict[str, Any] = field(default_factory=dict)


def compatible(stack: Stack, other: Stack) -> bool:
    """Two stacks agree on every part both know, and both know the node image (GPU Feature
    Discovery may label the driver only after a node's first verdict)."""
    mine, theirs = dict(stack), dict(other)
    return ("nodeImage" in mine and "nodeImage" in theirs
            and all(mine[key] == theirs[key] for key in mine.keys() & theirs.keys()))


def describe(stack: Stack) -> str:
    return ", ".join(f"{key} {value}" for key, value in stack) or "an unknown stack"


def judges(record: Verdict) -> bool:
    """Whether a record judges its node's GPU stack: a check verdict, or the watchdog's failure of a
    node whose check never ran or never finished (a driver that never loads)."""
    return record.source in CHECK_SOURCES or (record.source == "watchdog" and record.check in WATCHDOG_FAILURES
                                              and record.verdict in ("failed", "held"))


def latest_by_node(records: Sequence[Verdict]) -> dict[str, Verdict]:
    """Each node's newest check verdict (records are oldest first, as the record keeps them);
    a node whose newest is not final ("accepting") is left out until its acceptance ends."""
    newest: dict[str, Verdict] = {}
    for record in records:
        if judges(record) and (record.verdict in FINAL or record.verdict == "accepting"):
            newest[record.node] = record
    return {node: record for node, record in newest.items() if record.verdict in FINAL}


def measured_by_node(records: Sequence[Verdict]) -> dict[str, Measurements]:
    """Each node's figures over its check verdicts (records oldest first): per figure, the newest
    verdict that recorded it."""
    found: dict[str, dict[str, float]] = {}
    for record in records:
        if record.source in CHECK_SOURCES:
            found.setdefault(record.node, {}).update(
                {key: value for key, value in dataclasses.asdict(record.measurements).items() if value is not None})
    return {node: Measurements(**figures) for node, figures in found.items()}


# The NCCL figure the floor is held to: (the record's key, the Measurements attribute, what it is).
CROSS_NODE = ("crossNodeBusBwGbps", "cross_node_busbw_gbps",
              "the cross-node acceptance's all-reduce between pairs of nodes")
INTRA_NODE = ("ncclBusBwGbps", "nccl_busbw_gbps", "the gate check's all-reduce within each node")


def nccl_figure(canary: Sequence[Verdict]) -> tuple[str, str, str]:
    """CROSS_NODE where the canary's pool runs the cross-node acceptance (InfiniBand pools: the
    acceptance has recorded verdicts of its nodes), else INTRA_NODE."""
    if any(r.source == "acceptance" for r in canary):
        return CROSS_NODE
    return INTRA_NODE


def select(records: Sequence[Verdict], canary_pool: str,
           baseline: Stack | None = None) -> tuple[Stack, list[Verdict], list[Verdict]]:
    """(candidate stack, the canary's records on it, the baseline's records). The candidate is the
    stack of the canary pool's newest verdict; the baseline is the same VM sizes' verdicts on
    `baseline` (the pinned stack) or, without one, on any other stack."""
    canary_all = [r for r in records if r.pool == canary_pool and judges(r) and r.stack]
    if not canary_all:
        return (), [], []
    checked = [r for r in canary_all if r.source in CHECK_SOURCES]
    candidate = (checked or canary_all)[-1].stack
    # Only verdicts on exactly the candidate count: one that lacks a part the candidate has (a driver
    # GPU Feature Discovery had not labelled yet) may come from the stack before it. A node the
    # watchdog failed counts on the candidate's node image, driver or not: a driver that never
    # loads leaves no driver label.
    canary = [r for r in canary_all if r.stack == candidate
              or (r.source == "watchdog" and compatible(r.stack, candidate))]
    sizes = {r.vm_size for r in canary}
    others = [r for r in records if r.source in CHECK_SOURCES and r.vm_size in sizes and r.stack
              and not compatible(r.stack, candidate)]
    if baseline:
        others = [r for r in others if compatible(r.stack, baseline)]
    return candidate, canary, others


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 1) if values else None


def _worse(what: str, canary: float, baseline: float, tolerance: float) -> str | None:
    floor = baseline * (1 - tolerance)
    if canary < floor:
        return (f"the canary's {what} median {canary:g} is {1 - canary / baseline:.1%} below the baseline's "
                f"{baseline:g} (tolerance {tolerance:.0%})")
    return None


def decide(canary: Sequence[Verdict], baseline: Sequence[Verdict], rules: Rules, candidate: Stack = ()) -> Decision:
    """The decision over the canary's records on `candidate` and the baseline's records."""
    nodes = latest_by_node(canary)
    measured = measured_by_node(canary)
    passed = [r for r in nodes.values() if r.verdict == "passed"]
    failed = [r for r in nodes.values() if r.verdict == "failed"]
    held = [r for r in nodes.values() if r.verdict == "held"]
    total = len(nodes)
    evidence: dict[str, Any] = {
        "candidate": dict(candidate), "canaryNodes": total, "passed": len(passed), "failed": len(failed),
        "held": len(held), "failures": {r.node: f"{r.check or 'check'}: {r.reason}" for r in [*failed, *held]}}

    def out(action: Action, reasons: list[str], missing: list[str] | None = None) -> Decision:
        return Decision(action, tuple(reasons), candidate, tuple(missing or ()), evidence)

    if held:
        return out("rollback", [f"the gate's circuit breaker held {len(held)} canary node(s) on {describe(candidate)}: "
                                "a systemic failure (image, driver or operator), not one node's GPUs"])
    if len(failed) >= rules.rollback_failures and len(failed) * 2 > total:
        checks = sorted({r.check or "check" for r in failed})
        return out("rollback", [f"{len(failed)} of {total} canary nodes failed on {describe(candidate)} "
                                f"({', '.join(checks)})"])
    if total < rules.min_canary_nodes:
        return out("wait", [f"{total} of the {rules.min_canary_nodes} canary nodes the rule needs have a final "
                            f"verdict on {describe(candidate)}"])
    evidence["passRate"] = round(len(passed) / total, 3)
    refusals = []
    if len(passed) / total < rules.min_pass_rate:
        refusals.append(f"pass rate {len(passed)}/{total} = {len(passed) / total:.0%} is below the rule's "
                        f"{rules.min_pass_rate:.0%}")
    base = list(latest_by_node(baseline).values())
    base_measured = measured_by_node(baseline)
    base_passed = [r for r in base if r.verdict == "passed"]
    missing = []
    figures = {"gemm": ("GEMM TFLOPS", "gemm_tflops", rules.gemm_tolerance),
               "hbm": ("memory bandwidth GB/s", "hbm_gbps", rules.bandwidth_tolerance)}
    for key, (what, attribute, tolerance) in figures.items():
        mine = _median([v for r in passed if (v := getattr(measured[r.node], attribute)) is not None])
        theirs = _median([v for r in base_passed if (v := getattr(base_measured[r.node], attribute)) is not None])
        evidence[f"{key}Median"] = {"canary": mine, "baseline": theirs}
        lacking = sorted(r.node for r in passed if getattr(measured[r.node], attribute) is None)
        if lacking:
            missing.append(f"the canary's {what} on {', '.join(lacking)} (each passed canary node must record "
                           "it: the gate's check level must include the GEMM and bandwidth checks)")
        if theirs is None:
            missing.append(f"the baseline's {what} (no passed node of the canary's VM size on the baseline "
                           "stack recorded it)")
        if mine is not None and theirs is not None:
            worse = _worse(what, mine, theirs, tolerance)
            if worse:
                refusals.append(worse)
    if rules.nccl_floor_gbps is not None:
        record_key, attribute, source = nccl_figure(canary)
        cross = record_key == CROSS_NODE[0]
        what = "cross-node NCCL bus bandwidth" if cross else "NCCL bus bandwidth"
        figure = {r.node: getattr(measured[r.node], attribute) for r in passed}
        busbw = [v for v in figure.values() if v is not None]
        evidence["ncclBusBwGbps"] = {"canaryMin": min(busbw) if busbw else None, "floor": rules.nccl_floor_gbps,
                                     "figure": record_key, "measuredBy": source}
        lacking = sorted(node for node, value in figure.items() if value is None)
        if lacking:
            missing.append(f"the canary's {what} on {', '.join(lacking)} (the rule has a floor" + (
                "; the pool runs the cross-node acceptance: a node it released unmeasured, or an acceptance "
                "older than this figure, records none)" if cross else ")"))
        if busbw and min(busbw) < rules.nccl_floor_gbps:
            low = sorted(node for node, value in figure.items() if value is not None and value < rules.nccl_floor_gbps)
            refusals.append(f"{what} {min(busbw):g} GB/s on {', '.join(low)} is below the floor "
                            f"{rules.nccl_floor_gbps:g} GB/s ({source})")
    if refusals:
        return out("refuse", refusals)
    if missing:
        return out("wait", ["a measurement the rules compare is missing"], missing)
    return out("promote", [f"{len(passed)} of {total} canary nodes passed on {describe(candidate)}, "
                           "medians within tolerance of the baseline"])
