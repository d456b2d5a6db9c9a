"""The decision and the changes as `aksgpu promote` prints them: text for people, JSON for scripts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aksgpu.promotion.decision import Decision, describe
from aksgpu.promotion.promote import Change

VERBS = {"promote": "PROMOTE", "wait": "WAIT", "refuse": "REFUSE", "rollback": "ROLL BACK"}


def _where(change: Change) -> str:
    return change.field


def text(env: str, decision: Decision, changes: list[Change], notes: list[str], *, dry_run: bool,
         written: bool, event_only: Sequence[str] = ()) -> str:
    evidence = decision.evidence
    lines = [f"{VERBS[decision.action]}: environment {env}, candidate {describe(decision.candidate)}"]
    lines += [f"  - {reason}" for reason in decision.reasons]
    lines += [f"  missing: {item}" for item in decision.missing]
    if "canaryNodes" in evidence:
        lines.append(f"  canary nodes with a final verdict: {evidence.get('canaryNodes', 0)} "
                     f"(passed {evidence.get('passed', 0)}, failed {evidence.get('failed', 0)}, "
                     f"held {evidence.get('held', 0)})")
    for key, label in (("gemmMedian", "GEMM TFLOPS median"), ("hbmMedian", "memory bandwidth GB/s median")):
        if key in evidence:
            lines.append(f"  {label}: canary {evidence[key]['canary']}, baseline {evidence[key]['baseline']}")
    if "ncclBusBwGbps" in evidence:
        nccl = evidence["ncclBusBwGbps"]
        lines.append(f"  NCCL bus bandwidth: canary lowest {nccl['canaryMin']} GB/s, floor {nccl['floor']}"
                     + (f" ({nccl['figure']}: {nccl['measuredBy']})" if nccl.get("figure") else ""))
    lines += [f"  failed {node}: {why}" for node, why in sorted((evidence.get("failures") or {}).items())]
    if event_only:
        lines.append(f"  note: {len(event_only)} node(s) have gate Events but no record entry (not counted): "
                     f"{', '.join(event_only[:5])}")
    if changes:
        head = "would set" if dry_run else ("set" if written else "to set")
        lines.append(f"environments.yaml ({head}):")
        lines += [f"  {_where(c)}: {c.before or '(unset)'} -> {c.value}   # {c.what}" for c in changes]
    lines += [f"note: {note}" for note in notes]
    if written:
        lines.append(f"Next: `aksgpu render {env}`, review with `aksgpu plan {env}`, then `aksgpu up {env}`.")
    return "\n".join(lines)


def document(env: str, decision: Decision, changes: list[Change], notes: list[str], *, dry_run: bool,
             written: bool, event_only: Sequence[str] = ()) -> dict[str, Any]:
    return {"environment": env, "action": decision.action, "candidate": dict(decision.candidate),
            "reasons": list(decision.reasons), "missing": list(decision.missing), "evidence": decision.evidence,
            "changes": [{"path": _where(c), "before": c.before, "value": c.value, "what": c.what} for c in changes],
            "notes": notes, "dryRun": dry_run, "written": written, "eventOnlyNodes": list(event_only)}
