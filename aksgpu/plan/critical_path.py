"""The plan as a schedule: each resource's create time, what it waits for, and the critical path.

Method (README, "Deploy-time estimate"; deploy_time.py puts it together):
- Every custom resource takes the typical create time of its type (or its variant: a pool with
  nodes and the managed GPU driver, a pool with none, a Helm release that skips awaiting) from
  aksgpu/catalog/deploy_durations.yaml, sourced or marked as an assumption there.
- A resource starts when everything it waits for is created: its recorded dependencies (inputs
  and depends_on), its explicit provider, a custom parent (the SDK needs the parent's URN, which
  the engine returns once the parent is created), and the waits the table lists that the mock
  engine cannot record (the Kubernetes provider waits for the cluster's credentials). A
  dependency on a component stands for its custom descendants. Components take no time.
- The engine runs everything else in parallel (`pulumi up`'s default --parallel is unbounded),
  so the total is the latest finish, and the critical path is the chain of resources that ends
  there, each started by the one before it. Ties go to the smaller URN: the same plan always
  gives the same estimate.

It reads the planner's model (aksgpu.plan.planner: Plan and its PlannedResources).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aksgpu import catalog

if TYPE_CHECKING:
    from aksgpu.plan.planner import PlannedResource

TABLE = "deploy_durations"
TABLE_PATH = "aksgpu/catalog/deploy_durations.yaml"
POOL_TYPE = "azure-native:containerservice:AgentPool"
RELEASE_TYPE = "kubernetes:helm.sh/v3:Release"


@dataclass(frozen=True)
class Duration:
    key: str
    """The table entry used: a type, a type#variant, a prefix, or "default"."""
    seconds: int
    assumed: bool


@dataclass(frozen=True)
class Step:
    urn: str
    type: str
    name: str
    duration: Duration
    start: int
    finish: int


@dataclass(frozen=True)
class Schedule:
    total: int
    """Seconds until the last resource is created, everything independent running in parallel."""
    serial: int
    """Seconds with `pulumi up --parallel 1`: every create one after another."""
    critical_path: list[Step]
    steps: dict[str, Step]


def duration_key(resource: PlannedResource) -> str:
    """The table key for a resource: its type, or a variant of it whose create time differs."""
    inputs = resource.inputs or {}
    if resource.type == POOL_TYPE:
        if inputs.get("count") == 0:
            return f"{POOL_TYPE}#noNodes"
        size = catalog.vm_size(str(inputs.get("vmSize", "")))
        driver = (inputs.get("gpuProfile") or {}).get("driver", "Install")
        if size is not None and size.gpus and driver != "None":
            return f"{POOL_TYPE}#gpuDriver"
    if resource.type == RELEASE_TYPE and inputs.get("skipAwait") is True:
        return f"{RELEASE_TYPE}#skipAwait"
    return resource.type


def duration_of(resource: PlannedResource, table: Mapping[str, Any] | None = None) -> Duration:
    """The typical create time of a resource, from the most specific entry of the table."""
    table = table if table is not None else catalog.load(TABLE)
    key = duration_key(resource)
    types = table["types"]
    for candidate in (key, resource.type):
        if candidate in types:
            return _duration(candidate, types[candidate])
    for prefix in sorted(table.get("prefixes") or {}, key=len, reverse=True):
        if resource.type.startswith(prefix):
            return _duration(prefix + "*", table["prefixes"][prefix])
    return _duration("default", table["default"])


def _duration(key: str, entry: Mapping[str, Any]) -> Duration:
    return Duration(key, int(entry["seconds"]), bool(entry.get("assumption", False)))


def waits_for(resources: Sequence[PlannedResource], table: Mapping[str, Any] | None = None) -> dict[str, set[str]]:
    """For each custom resource (by URN), the custom resources it cannot start before."""
    table = table if table is not None else catalog.load(TABLE)
    by_urn = {r.urn: r for r in resources}
    children: dict[str, list[str]] = {}
    for resource in resources:
        if resource.parent in by_urn:
            children.setdefault(resource.parent, []).append(resource.urn)

    def custom_descendants(urn: str) -> set[str]:
        found: set[str] = set()
        for child in children.get(urn, []):
            if by_urn[child].custom:
                found.add(child)
            found |= custom_descendants(child)
        return found

    implicit = table.get("implicitWaits") or {}
    graph: dict[str, set[str]] = {}
    for resource in resources:
        if not resource.custom:
            continue
        waits: set[str] = set()
        for urn in [*resource.dependencies, resource.provider, resource.parent]:
            target = by_urn.get(urn) if urn else None
            if target is None or (urn == resource.parent and not target.custom):
                continue  # unknown URNs, and component parents (they register at once)
            waits |= {target.urn} if target.custom else custom_descendants(target.urn) - {resource.urn}
        for waited_type in (implicit.get(resource.type) or {}).get("waitsFor", []):
            waits |= {r.urn for r in resources if r.custom and r.type == waited_type}
        graph[resource.urn] = waits - {resource.urn}
    return graph


def schedule(resources: Sequence[PlannedResource], graph: Mapping[str, set[str]],
             table: Mapping[str, Any] | None = None) -> Schedule:
    """Earliest start and finish of every resource in `graph`, the total and the critical path."""
    table = table if table is not None else catalog.load(TABLE)
    by_urn = {r.urn: r for r in resources}
    durations = {urn: duration_of(by_urn[urn], table) for urn in graph}
    steps: dict[str, Step] = {}
    critical_wait: dict[str, str | None] = {}
    for urn in topological_order(graph):
        waits = graph[urn]
        # The wait that finishes last starts this one; among equal finishes, the smaller URN.
        before = min(waits, key=lambda w: (-steps[w].finish, w), default=None)
        start = steps[before].finish if before is not None else 0
        resource = by_urn[urn]
        steps[urn] = Step(urn, resource.type, resource.name, durations[urn], start, start + durations[urn].seconds)
        critical_wait[urn] = before
    if not steps:
        return Schedule(0, 0, [], {})
    end: str | None = min(steps, key=lambda u: (-steps[u].finish, u))
    path: list[Step] = []
    while end is not None:
        path.append(steps[end])
        end = critical_wait[end]
    return Schedule(max(s.finish for s in steps.values()), sum(d.seconds for d in durations.values()),
                    list(reversed(path)), steps)


def topological_order(graph: Mapping[str, set[str]]) -> list[str]:
    """Every URN after all it waits for; among ready ones, URN order (Kahn's algorithm)."""
    remaining = {urn: set(waits) & set(graph) for urn, waits in graph.items()}
    dependents: dict[str, list[str]] = {}
    for urn, waits in remaining.items():
        for wait in waits:
            dependents.setdefault(wait, []).append(urn)
    ready = sorted(urn for urn, waits in remaining.items() if not waits)
    order: list[str] = []
    while ready:
        urn = ready.pop(0)
        order.append(urn)
        for dependent in sorted(dependents.get(urn, [])):
            remaining[dependent].discard(urn)
            if not remaining[dependent]:
                ready.append(dependent)
        ready.sort()
    if len(order) != len(remaining):
        stuck = sorted(set(remaining) - set(order))
        raise ValueError(f"the plan's dependencies form a cycle through {stuck[0]}; no order can create them")
    return order


def by_type(sched: Schedule) -> dict[str, dict[str, Any]]:
    """Per type (or type#variant): how many resources, their seconds added up (as if one after
    another), the table entry used, and whether its figure is an assumption."""
    totals: dict[str, dict[str, Any]] = {}
    for step in sched.steps.values():
        key = step.type if step.duration.key.endswith("*") or step.duration.key == "default" else step.duration.key
        row = totals.setdefault(key, {"count": 0, "seconds": 0, "entry": step.duration.key,
                                      "assumed": step.duration.assumed})
        row["count"] += 1
        row["seconds"] += step.duration.seconds
    return dict(sorted(totals.items()))
