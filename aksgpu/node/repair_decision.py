"""What the repair loop does to each GPU node: a pure function of recorded node states.

Given what the gate and Azure left on the nodes (the gate's verdict and when it failed the node,
the repair's own marks, the pods still to move and the PodDisruptionBudgets that block them, Azure
Scheduled Events), the policy (gpuHealth.repair) and the repair actions of the recent past, decide
per node: nothing, wait, drain, reimage or delete, each with its reason. No API, no clock: the node
program (node_repair.py) reads the cluster, calls `decide`, and applies what it says.

The rules (docs/guides/repair.md gives their sources):
  * A node the gate failed is kept for diagnosis `diagnosis_window_minutes` after its failure:
    "wait". Then it is drained (evictions through the Eviction API, so PodDisruptionBudgets hold;
    "wait" while a budget allows no disruption), then its VMSS instance is reimaged, or it is deleted
    once it has already been reimaged `reimage_attempts` times (a fault a fresh OS disk did not fix
    is the hardware's).
  * At most max(1, floor(pool size x max_unavailable_percent / 100)) nodes of a pool are under
    repair at once (draining, reimaging, or deleted within the last `settle_minutes`); the others wait.
  * The circuit breaker: when more than `breaker_pool_percent` of a pool's nodes, or
    `breaker_cluster_percent` of all GPU nodes, failed within `breaker_window_minutes` (and at least
    `breaker_min_failures` did), the failures look systemic (a broken node image, driver or check,
    as in NVIDIA NVSentinel's fault-quarantine breaker) and no failed node of that scope is repaired.
  * An Azure Scheduled Event of a type in `drain_event_types` (maintenance Reboot and Redeploy,
    spot Preempt, scale-in Terminate by default; Freeze when asked for) drains the node ahead of time, whatever its
    verdict, outside the pool's bound and the breaker: Azure acts on the node at NotBefore anyway,
    and draining first only moves its pods earlier, with their budgets respected.

Standard library only, importing nothing of aksgpu: shipped beside node_repair.py in its ConfigMap."""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass, field
from typing import Literal

Action = Literal["nothing", "wait", "drain", "reimage", "delete"]
# The repair's own mark on a node (node_repair.REPAIR_ANNOTATION): where its repair stands.
InFlight = Literal["draining", "reimaging", "deleting"]
IN_FLIGHT: tuple[str, ...] = ("draining", "reimaging", "deleting")
# Event types of Azure Scheduled Events (api-version 2020-07-01;
# https://learn.microsoft.com/en-us/azure/virtual-machines/linux/scheduled-events, checked 2026-11-27).
EVENT_TYPES = ("Freeze", "Reboot", "Redeploy", "Preempt", "Terminate")
# Drained ahead by default: all but Freeze, which "pause[s] for a few seconds" with "no impact on
# memory or open files" (same page): draining a GPU node's jobs for it costs far more than it saves.
DEFAULT_DRAIN_EVENTS = ("Reboot", "Redeploy", "Preempt", "Terminate")


@dataclass(frozen=True)
class RepairPolicy:
    """gpuHealth.repair, as the loop reads it."""

    diagnosis_window_minutes: float = 60.0
    max_unavailable_percent: float = 10.0
    reimage_attempts: int = 1
    breaker_pool_percent: float = 50.0
    breaker_cluster_percent: float = 30.0
    breaker_window_minutes: float = 60.0
    breaker_min_failures: int = 3
    settle_minutes: float = 30.0
    drain_event_types: tuple[str, ...] = DEFAULT_DRAIN_EVENTS


@dataclass(frozen=True)
class ScheduledEvent:
    """One Azure Scheduled Event for the node's VM (from IMDS, or AKS node-problem-detector's
    VMEventScheduled condition)."""

    event_type: str
    not_before: str = ""  # as Azure gives it ("Mon, 19 Sep 2016 18:29:47 GMT"), or empty
    event_id: str = ""
    status: str = "Scheduled"


@dataclass(frozen=True)
class NodeState:
    """What the loop knows about one GPU node."""

    name: str
    pool: str | None
    health: str | None = None  # the gate's aksgpu.io/gpu-health label
    failed_at: datetime.datetime | None = None  # when the gate (or a re-check, the watchdog) failed it
    failed_check: str | None = None
    repair: str | None = None  # the repair's own mark: draining, reimaging, deleting
    repair_at: datetime.datetime | None = None
    reimages: int = 0  # reimages the repair has done on this node
    pods_left: int = 0  # pods the drain still has to evict (no DaemonSet, mirror or finished pods)
    blocking_budgets: tuple[str, ...] = ()  # namespace/name of budgets that allow no disruption of its pods
    events: tuple[ScheduledEvent, ...] = ()
    vmss_instance: bool = True  # its providerID names a VMSS instance


@dataclass(frozen=True)
class RecentAction:
    """A repair action from the record (a deleted node is no longer in the node list)."""

    node: str
    pool: str | None
    action: str
    time: datetime.datetime


@dataclass(frozen=True)
class Decision:
    node: str
    pool: str | None
    action: Action
    reason: str
    event: ScheduledEvent | None = None  # set when a Scheduled Event caused the drain


@dataclass
class _Pool:
    size: int = 0
    failed_recently: int = 0
    busy: set[str] = field(default_factory=set)  # nodes under repair, counted against the bound


def pool_bound(size: int, percent: float) -> int:
    """Nodes of a pool that may be under repair at once: max(1, floor(size x percent / 100))."""
    return max(1, math.floor(size * percent / 100))


def _share(part: int, whole: int) -> str:
    return f"{part} of {whole} ({100 * part / whole:.0f}%)" if whole else f"{part} of 0"


def breaker(nodes: list[NodeState], policy: RepairPolicy,
            now: datetime.datetime) -> tuple[str | None, dict[str | None, str]]:
    """The circuit breaker: (the reason it is open for the whole cluster, or None; pool -> the
    reason it is open for that pool). Failures are failed or held nodes whose failure is within the
    window (held: the gate's own breaker already thought them systemic)."""
    since = now - datetime.timedelta(minutes=policy.breaker_window_minutes)
    pools: dict[str | None, _Pool] = {}
    for node in nodes:
        pool = pools.setdefault(node.pool, _Pool())
        pool.size += 1
        if node.health in ("failed", "held") and node.failed_at is not None and node.failed_at >= since:
            pool.failed_recently += 1
    window = f"{policy.breaker_window_minutes:g} minutes"
    failed = sum(p.failed_recently for p in pools.values())
    cluster = None
    if failed >= policy.breaker_min_failures and failed * 100 > policy.breaker_cluster_percent * len(nodes):
        cluster = (f"circuit breaker open: {_share(failed, len(nodes))} GPU nodes failed within {window} "
                   f"(limit {policy.breaker_cluster_percent:g}%), which points at the node image, the driver or "
                   "the check rather than the nodes; no failed node is repaired until that share falls")
    open_pools = {
        name: (f"circuit breaker open for pool {name}: {_share(p.failed_recently, p.size)} nodes failed within "
               f"{window} (limit {policy.breaker_pool_percent:g}%), which points at the node image, the driver or "
               "the check rather than the nodes; none of its failed nodes is repaired until that share falls")
        for name, p in pools.items()
        if p.failed_recently >= policy.breaker_min_failures
        and p.failed_recently * 100 > policy.breaker_pool_percent * p.size}
    return cluster, open_pools


def _event_drain(node: NodeState, policy: RepairPolicy) -> Decision | None:
    event = next((e for e in node.events if e.event_type in policy.drain_event_types
                  and e.status in ("Scheduled", "Started")), None)
    if event is None:
        return None
    when = f" not before {event.not_before}" if event.not_before else ""
    named = f"Azure scheduled {event.event_type}" + (f" ({event.event_id})" if event.event_id else "") + when
    if node.pods_left == 0:
        return Decision(node.name, node.pool, "nothing", f"{named}: already drained", event)
    blocked = f"; budgets that allow no disruption now keep their pods: {', '.join(node.blocking_budgets)}" \
        if node.blocking_budgets else ""
    return Decision(node.name, node.pool, "drain",
                    f"{named}: cordoned and its {node.pods_left} pod(s) evicted ahead of it{blocked}", event)


def _minutes(delta: datetime.timedelta) -> str:
    return f"{delta.total_seconds() / 60:.0f}"


def decide(nodes: list[NodeState], policy: RepairPolicy, recent: list[RecentAction],
           now: datetime.datetime) -> list[Decision]:
    """One decision per node, in the order of `nodes`' names. `nodes` are the cluster's GPU nodes
    (the pools the loop repairs); `recent` the repair actions recorded before this pass."""
    cluster_open, pools_open = breaker(nodes, policy, now)
    pools: dict[str | None, _Pool] = {}
    present = {node.name for node in nodes}
    for node in nodes:
        pool = pools.setdefault(node.pool, _Pool())
        pool.size += 1
        if node.repair in IN_FLIGHT and node.health not in ("passed", "unchecked"):
            pool.busy.add(node.name)  # a repaired node back in service no longer counts
    settle = now - datetime.timedelta(minutes=policy.settle_minutes)
    for action in recent:
        # A node deleted a while ago whose replacement may not have come yet still counts.
        if action.action == "delete" and action.node not in present and action.time >= settle:
            pools.setdefault(action.pool, _Pool()).busy.add(action.node)
    decisions: dict[str, Decision] = {}
    failed: list[NodeState] = []
    for node in nodes:
        drained = _event_drain(node, policy)
        if drained is not None:
            decisions[node.name] = drained
            if drained.action == "drain":
                pools[node.pool].busy.add(node.name)
            continue
        if node.health == "held":
            decisions[node.name] = Decision(node.name, node.pool, "nothing", "held by the gate's circuit breaker: "
                                            "its failure looks systemic, not this node's")
        elif node.health != "failed":
            decisions[node.name] = Decision(node.name, node.pool, "nothing", f"gate verdict {node.health or 'none'}")
        else:
            failed.append(node)
    window = datetime.timedelta(minutes=policy.diagnosis_window_minutes)
    # Oldest failures first: they have waited longest for their slot in the pool's bound.
    for node in sorted(failed, key=lambda n: (n.failed_at or now, n.name)):
        decisions[node.name] = _failed(node, policy, pools[node.pool], pools_open.get(node.pool) or cluster_open,
                                       window, now)
    return [decisions[name] for name in sorted(decisions)]


def _failed(node: NodeState, policy: RepairPolicy, pool: _Pool, open_breaker: str | None,
            window: datetime.timedelta, now: datetime.datetime) -> Decision:
    check = f" ({node.failed_check})" if node.failed_check else ""
    if not node.vmss_instance:
        return Decision(node.name, node.pool, "nothing", "failed, but its providerID names no VMSS instance to "
                                                         "reimage or delete")
    if node.repair == "deleting" and node.repair_at is not None \
            and now - node.repair_at < datetime.timedelta(minutes=policy.settle_minutes):
        return Decision(node.name, node.pool, "wait", f"its VMSS instance's delete was requested "
                        f"{_minutes(now - node.repair_at)} minutes ago; waiting for the node to leave (asked again "
                        f"after {policy.settle_minutes:g} minutes)")
    if open_breaker:
        return Decision(node.name, node.pool, "nothing", open_breaker)
    if node.failed_at is None:
        return Decision(node.name, node.pool, "wait", "failed, with no failure time recorded: the diagnosis window "
                                                      "starts when the gate records one")
    if now - node.failed_at < window:
        due = node.failed_at + window
        return Decision(node.name, node.pool, "wait",
                        f"failed{check} {_minutes(now - node.failed_at)} minutes ago; kept for diagnosis "
                        f"{policy.diagnosis_window_minutes:g} minutes, repaired from {due:%Y-%m-%dT%H:%M:%SZ}")
    if node.name not in pool.busy:
        bound = pool_bound(pool.size, policy.max_unavailable_percent)
        if len(pool.busy) >= bound:
            return Decision(node.name, node.pool, "wait",
                            f"failed{check}; pool {node.pool} already has {len(pool.busy)} node(s) under repair, "
                            f"its bound is {bound} (max(1, {policy.max_unavailable_percent:g}% of {pool.size}))")
        pool.busy.add(node.name)
    if node.blocking_budgets:
        return Decision(node.name, node.pool, "wait",
                        f"failed{check}; draining, but PodDisruptionBudget {', '.join(node.blocking_budgets)} "
                        f"allows no disruption now ({node.pods_left} pod(s) left)")
    if node.pods_left:
        return Decision(node.name, node.pool, "drain",
                        f"failed{check} {_minutes(now - node.failed_at)} minutes ago, past its diagnosis window: "
                        f"cordoned, its {node.pods_left} pod(s) evicted (their budgets respected)")
    if node.reimages >= policy.reimage_attempts:
        return Decision(node.name, node.pool, "delete",
                        f"failed{check} again after {node.reimages} reimage(s): it is deleted through AKS")
    return Decision(node.name, node.pool, "reimage",
                    f"failed{check}, drained: its VMSS instance is reimaged (attempt {node.reimages + 1} of "
                    f"{policy.reimage_attempts}), then checked again by the gate")
