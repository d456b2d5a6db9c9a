"""Deploy-time estimate of a first `pulumi up`: the total, the critical path, and what the node
pool ordering (chained or perSubnet) does to it, from the offline plan's dependency graph and the
per-type create times in aksgpu/catalog/deploy_durations.yaml.

`estimate(plan)` computes it (critical_path.py: durations, waits, schedule; pool_ordering.py: the
other ordering, simulated); `document` is the `deployTime` object of `aksgpu plan --json`,
`text_lines` the section of `aksgpu plan`, `summary_line` the pull-request summary's line. The
same plan always gives the same output. Imports nothing of the CLI.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aksgpu import catalog
from aksgpu.plan.critical_path import TABLE, TABLE_PATH, Schedule, by_type, schedule, waits_for

if TYPE_CHECKING:
    from aksgpu.plan.planner import Plan
from aksgpu.plan.pool_ordering import ordering_summary, reorder


@dataclass(frozen=True)
class DeployTime:
    schedule: Schedule
    ordering: dict[str, Any]
    """declared (chained, perSubnet, or None when both build the same graph), alternative, pools, subnets."""
    alternative_total: int | None
    """Seconds with the other pool ordering, simulated on the same graph (None: no other ordering)."""
    engine: dict[str, Any]


def estimate(plan: Plan) -> DeployTime:
    table = catalog.load(TABLE)
    resources = list(plan.resources)
    graph = waits_for(resources, table)
    ordering = ordering_summary(resources, graph)
    alternative_total = None
    if ordering["alternative"] is not None:
        alternative_total = schedule(resources, reorder(resources, graph, ordering["alternative"]), table).total
    return DeployTime(schedule(resources, graph, table), ordering, alternative_total, dict(table["engine"]))


def document(deploy_time: DeployTime) -> dict[str, Any]:
    """The `deployTime` object of the plan document (README, "Deploy-time estimate")."""
    sched = deploy_time.schedule
    types = by_type(sched)
    path = [{"type": step.type, "name": step.name, "urn": step.urn, "durationKey": step.duration.key,
             "seconds": step.duration.seconds, "startSeconds": step.start, "finishSeconds": step.finish,
             "assumed": step.duration.assumed} for step in sched.critical_path]
    return {
        "totalSeconds": sched.total,
        "totalMinutes": round(sched.total / 60, 1),
        "serialSeconds": sched.serial,
        "parallel": deploy_time.engine["parallel"],
        "criticalPath": path,
        "nodePoolOrdering": {**deploy_time.ordering, "alternativeTotalSeconds": deploy_time.alternative_total},
        "assumedTypes": sorted(key for key, row in types.items() if row["assumed"]),
        "criticalPathAssumedSteps": sum(1 for step in path if step["assumed"]),
        "byType": types,
        "table": TABLE_PATH,
    }


def _minutes(seconds: int) -> str:
    return f"{seconds} s" if seconds < 60 else f"{seconds / 60:.1f} min"


def _about(seconds: int) -> str:
    return f"about {round(seconds / 60)} min"


def _short(type_: str) -> str:
    return type_.rsplit(":", 1)[-1]


def ordering_text(doc: dict[str, Any]) -> str | None:
    """One sentence on the node pool ordering; None when the plan has no separate pools."""
    ordering = doc["nodePoolOrdering"]
    pools, subnets = ordering["pools"], ordering["subnets"]
    if pools == 0:
        return None
    if ordering["declared"] is None:
        return (f"Node pools: {pools} on one subnet, where chained and perSubnet build the same graph, "
                "so the ordering changes nothing.")
    alternative = ordering["alternativeTotalSeconds"]
    change = alternative - doc["totalSeconds"]
    verdict = "no change" if change == 0 else f"{_minutes(abs(change))} {'longer' if change > 0 else 'shorter'}"
    return (f"Node pools {ordering['declared']} (as declared; {pools} pools on {subnets} subnets); "
            f"{ordering['alternative']} would give {_about(alternative)} ({verdict}).")


def assumptions_text(doc: dict[str, Any]) -> str | None:
    """Which types rest on assumed figures, naming the shorter of the two lists."""
    types = doc["byType"]
    assumed = [key for key, row in types.items() if row["assumed"]]
    if not assumed:
        return None
    sourced = [key for key, row in types.items() if not row["assumed"]]
    steps = f"{doc['criticalPathAssumedSteps']} of {len(doc['criticalPath'])} critical-path steps"
    if len(sourced) < len(assumed):
        named = ", ".join(_short(key) for key in sourced) or "none"
        return (f"Rests on assumed figures for {len(assumed)} of {len(types)} resource types ({steps}); "
                f"sourced: {named}. Sources and reasons: {doc['table']}.")
    return (f"Rests on assumed figures for {len(assumed)} of {len(types)} resource types ({steps}): "
            + ", ".join(_short(key) for key in assumed) + f". Sources and reasons: {doc['table']}.")


def text_lines(doc: dict[str, Any]) -> list[str]:
    """The plan text's section: total, critical path, the other pool ordering, what is assumed."""
    lines = [f"Deploy time (first `pulumi up`, estimate): {_about(doc['totalSeconds'])} ({doc['totalSeconds']} s).",
             "  Critical path (start, duration, resource; * = assumed figure, no sourced duration):"]
    for step in doc["criticalPath"]:
        lines.append(f"  {step['startSeconds'] / 60:>6.1f} min  {_minutes(step['seconds']):>9}  "
                     f"{_short(step['type'])} {step['name']}{' *' if step['assumed'] else ''}")
    lines += [f"  {text}" for text in (ordering_text(doc), assumptions_text(doc)) if text]
    lines.append(f"  Assumes `pulumi up`'s default parallelism ({doc['parallel']}); with --parallel 1: "
                 f"{_about(doc['serialSeconds'])}.")
    return lines


def path_outline(doc: dict[str, Any]) -> str:
    """The critical path by type, runs of one type collapsed: 'ManagedCluster → 8× AgentPool'."""
    runs: list[list[Any]] = []
    for step in doc["criticalPath"]:
        name = _short(step["type"])
        if runs and runs[-1][0] == name:
            runs[-1][1] += 1
        else:
            runs.append([name, 1])
    return " → ".join(name if count == 1 else f"{count}× {name}" for name, count in runs)


def summary_line(doc: dict[str, Any]) -> str:
    """One line for the pull-request summary."""
    line = f"{_about(doc['totalSeconds'])} for a first `pulumi up`; critical path {path_outline(doc)}."
    ordering = ordering_text(doc)
    if ordering:
        line += f" {ordering}"
    if doc["assumedTypes"]:
        line += (f" Rests on assumed figures for {doc['criticalPathAssumedSteps']} of {len(doc['criticalPath'])} "
                 f"critical-path steps ({doc['table']}).")
    return line
