"""A new GPU node's way to the gate's verdict, against the cluster autoscaler's clocks, and the
autoScalerProfile values that keep the autoscaler healthy while nodes are under the gate.

The autoscaler's rules (kubernetes/autoscaler tag cluster-autoscaler-1.36.1):
- clusterstate/clusterstate.go updateReadinessStats: a registered node that is not ready (a
  node with a startup taint counts as not ready: utils/taints/taints.go
  FilterOutNodesWithStartupTaints) is NotStarted while creationTimestamp + max-node-startup-time
  (15 minutes, not exposed by AKS) is in the future, and Unready after that.
- clusterstate.go IsClusterHealthy (lines 493-505): the cluster is unhealthy when the unready
  nodes exceed both ok-total-unready-count and max-total-unready-percentage of all nodes; then
  core/static_autoscaler.go RunOnce (lines 464-469) stops scaling the whole cluster.
- clusterstate.go updateScaleRequests and calculateUpcomingNodesInNodeGroup: the nodes of a
  scale-up stay "upcoming" until they are Ready or Unready (a NotStarted node is still upcoming);
  when scale-up time + max-node-provision-time passes with nodes still upcoming, the scale-up
  times out and the node group is backed off.

The gate keeps every new GPU node under its startup taint until the verdict (and a breaker-held
node indefinitely); a failed node kept for diagnosis advertises no GPUs, which the autoscaler's
GPU processor also counts as unready (processors/customresources/gpu_processor.go). The
figures come from aksgpu/catalog/deploy_durations.yaml (gpuNodeStartup) and
aks_limits.yaml (clusterAutoscaler*), each with its source or marked as an assumption.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aksgpu import catalog

from aksgpu.spec.base import Issue
from aksgpu.spec.fabric import is_infiniband_pool

if TYPE_CHECKING:
    from aksgpu.spec import ClusterSpec
    from aksgpu.spec.pools import NodePool


@dataclass(frozen=True)
class Step:
    """One step of a new node's way to the verdict (a row of deploy_durations.yaml gpuNodeStartup)."""

    step: str
    seconds: int
    assumption: bool


@dataclass(frozen=True)
class DerivedAutoscaler:
    """The autoScalerProfile values the spec's gated GPU pools need.

    IsClusterHealthy halts only when the unready nodes exceed both limits, so raising
    okTotalUnreadyCount to the gate's bound is enough; maxTotalUnreadyPercentage keeps AKS's
    default, and with it the autoscaler's guard against a cluster that is broken for other reasons.
    """

    ok_total_unready_count: int | None  # None: AKS's default will do
    max_node_provision_minutes: int
    # What they rest on, for messages: nodes the gate can leave unready at once, the nodes always
    # there, and the share of all nodes the first can be (a percentage that alone would do too).
    unready_nodes: int
    base_nodes: int
    unready_share: int


def autoscaler_defaults() -> dict[str, Any]:
    """AKS's autoscaler defaults (aks_limits.yaml clusterAutoscalerDefaults)."""
    return dict(catalog.limit("clusterAutoscalerDefaults"))


def startup_window_minutes() -> int:
    """max-node-startup-time: how long the autoscaler counts a not-ready node as starting."""
    return int(catalog.limit("clusterAutoscalerMaxNodeStartupMinutes"))


def _driver(pool: NodePool) -> str:
    settings = pool.gpu_settings
    return settings.driver if settings else "Install"


def _fabric(pool: NodePool) -> str | None:
    """"infiniband" for a pool aksgpu installs the RDMA stack on (spec/fabric.py), else None."""
    return "infiniband" if is_infiniband_pool(pool) else None


def _steps(phase: str, pool: NodePool) -> list[Step]:
    rows = catalog.load("deploy_durations")["gpuNodeStartup"][phase]
    return [Step(row["step"], int(row["seconds"]), bool(row.get("assumption")))
            for row in rows if row.get("driver") in (None, _driver(pool))
            and row.get("fabric") in (None, _fabric(pool))]


def provision_steps(pool: NodePool) -> list[Step]:
    """From the scale-up to the Node object (VM, boot, AKS's bootstrap and driver, registration)."""
    return _steps("provision", pool)


def startup_steps(pool: NodePool) -> list[Step]:
    """From the Node object to the start of the gate's check (node Ready, the gate's pod, for a
    GPU Operator pool its images, driver and toolkit, the check's image)."""
    return _steps("startup", pool)


def gated_pools(spec: ClusterSpec) -> list[NodePool]:
    """The node pools whose new nodes wait under the gate's startup taint: NVIDIA GPU pools, with
    the in-cluster layer and the gate on (the gate's DaemonSets cover the device-plugin and the GPU
    Operator pools, aksgpu/components/kubernetes/gpu_health.py)."""
    if not spec.in_cluster.enabled or not spec.gpu_health.gate.enabled:
        return []
    return [pool for pool in spec.node_pools if pool.gpu_vendor == "nvidia"]


def pool_startup_seconds(pool: NodePool) -> int:
    """Seconds from a new node's Node object to the start of its check (the table's figures)."""
    return sum(step.seconds for step in startup_steps(pool))


def verdict_seconds(spec: ClusterSpec, pool: NodePool) -> int:
    """Seconds from a new node's Node object to the gate's verdict at the latest: the steps before
    the check, then the check's whole time limit (gpuHealth.gate.timeoutSeconds)."""
    return pool_startup_seconds(pool) + spec.gpu_health.gate.timeout_seconds


def gate_startup_minutes(spec: ClusterSpec) -> int:
    """Minutes a new GPU node may take from its creation (the Node object) to the start of its check,
    over every gated pool of the spec, rounded up: the gate watchdog's allowance on top of the
    check's time limit. A spec without gated pools gets the figure of a device-plugin pool."""
    pools = gated_pools(spec)
    if pools:
        seconds = max(pool_startup_seconds(pool) for pool in pools)
    else:
        seconds = sum(int(row["seconds"]) for row in catalog.load("deploy_durations")["gpuNodeStartup"]["startup"]
                      if row.get("driver") in (None, "Install"))
    return math.ceil(seconds / 60)


def _agent_pool_nodes(pool: NodePool) -> int:
    """The most nodes all AgentPools of `pool` can have at once, surge nodes of an upgrade included."""
    return pool.node_range[1]


def gate_unready_bound(spec: ClusterSpec) -> int:
    """How many nodes the gate can leave unready (in the autoscaler's sense) at once: every node the
    gated pools can have. In a burst each new node may still be under check past the startup window,
    or be held by the breaker under the startup taint; and when failures are systemic with the
    breaker off, every failed node (cordoned, advertising no GPUs) is unready until the autoscaler
    removes it, scale-down-unready-time later."""
    return sum(_agent_pool_nodes(pool) for pool in gated_pools(spec))


def _base_nodes(spec: ClusterSpec) -> int:
    """Nodes the cluster always has besides the gated pools: the minimum of every other pool."""
    gated = {id(pool) for pool in gated_pools(spec)}
    return spec.system_pool.min_nodes + sum(pool.min_nodes * pool.zone_pool_count for pool in spec.node_pools
                                            if id(pool) not in gated)


def derived_autoscaler(spec: ClusterSpec) -> DerivedAutoscaler:
    """The profile values the gated pools need:
    - okTotalUnreadyCount: the gate's unready bound (at most AKS's most nodes per cluster), when it
      is above AKS's default;
    - maxNodeProvisionMinutes: AKS's default provisioning wait (or the table's provisioning time,
      if longer) plus the time a new node stays NotStarted under the gate: up to its verdict, at
      most the startup window (after that it counts as Unready, no longer upcoming)."""
    defaults = autoscaler_defaults()
    unready = min(gate_unready_bound(spec), int(catalog.limit("maxNodesPerCluster")))
    base = max(_base_nodes(spec), 1)
    count = unready if unready > defaults["okTotalUnreadyCount"] else None
    share = math.ceil(100 * unready / (unready + base)) if unready else 0
    window = startup_window_minutes() * 60
    default_provision = defaults["maxNodeProvisionMinutes"] * 60
    provision = default_provision
    for pool in gated_pools(spec):
        own = sum(step.seconds for step in provision_steps(pool))
        provision = max(provision, max(own, default_provision) + min(verdict_seconds(spec, pool), window))
    return DerivedAutoscaler(count, math.ceil(provision / 60), unready, base, share)


def cluster_healthy(unready: int, nodes: int, ok_total_unready_count: int,
                    max_total_unready_percentage: float) -> bool:
    """kubernetes/autoscaler cluster-autoscaler-1.36.1 clusterstate/clusterstate.go IsClusterHealthy
    (lines 493-505): unhealthy when totalUnready > OkTotalUnreadyCount and totalUnready >
    MaxTotalUnreadyPercentage/100 * len(nodes)."""
    return not (unready > ok_total_unready_count and unready > max_total_unready_percentage / 100.0 * nodes)


def effective_unready_limits(spec: ClusterSpec) -> tuple[int, int]:
    """(okTotalUnreadyCount, maxTotalUnreadyPercentage) the cluster runs with: the spec's, else
    the derived value, else AKS's default."""
    autoscaler = spec.control_plane.autoscaler
    defaults = autoscaler_defaults()
    count = autoscaler.ok_total_unready_count
    if count is None:
        count = derived_autoscaler(spec).ok_total_unready_count or defaults["okTotalUnreadyCount"]
    percentage = autoscaler.max_total_unready_percentage
    if percentage is None:
        percentage = defaults["maxTotalUnreadyPercentage"]
    return count, percentage


def gate_can_halt_autoscaler(spec: ClusterSpec) -> bool:
    """Whether some number of gate-unready nodes (1 up to the bound), beside the nodes always
    there, makes IsClusterHealthy false with the limits the cluster runs with."""
    derived = derived_autoscaler(spec)
    count, percentage = effective_unready_limits(spec)
    return any(not cluster_healthy(k, k + derived.base_nodes, count, percentage)
               for k in range(1, derived.unready_nodes + 1))


def check_autoscaler_profile(spec: ClusterSpec) -> Iterator[Issue]:
    """Explicit autoscaler values too low for the gated pools: one warning each, naming the derived figure."""
    autoscaler = spec.control_plane.autoscaler
    derived = derived_autoscaler(spec)
    path = "controlPlane.autoscaler"
    if gate_can_halt_autoscaler(spec):
        count, percentage = effective_unready_limits(spec)
        rule = (f"up to {derived.unready_nodes} GPU nodes can be unready at once under the gate (new nodes past the "
                f"autoscaler's {startup_window_minutes()}-minute startup window, nodes the breaker holds, failed "
                f"nodes kept), and with okTotalUnreadyCount {count} and maxTotalUnreadyPercentage {percentage} the "
                "cluster autoscaler then stops scaling the whole cluster")
        fix = (f"leave okTotalUnreadyCount unset (aksgpu derives {derived.unready_nodes}), or raise it to that, or "
               f"maxTotalUnreadyPercentage to {derived.unready_share}")
        if autoscaler.ok_total_unready_count is not None:
            yield Issue(f"{path}.okTotalUnreadyCount", autoscaler.ok_total_unready_count, rule, fix, "warning")
        if autoscaler.max_total_unready_percentage is not None:
            yield Issue(f"{path}.maxTotalUnreadyPercentage", autoscaler.max_total_unready_percentage, rule, fix,
                        "warning")
    explicit = autoscaler.max_node_provision_minutes
    if explicit is not None and explicit < derived.max_node_provision_minutes:
        yield Issue(f"{path}.maxNodeProvisionMinutes", explicit,
                    f"a new GPU node stays 'upcoming' to the autoscaler until the gate's verdict (up to "
                    f"{startup_window_minutes()} minutes after it joins), so a scale-up can take "
                    f"{derived.max_node_provision_minutes} minutes; one that takes longer than "
                    "maxNodeProvisionMinutes times out and the autoscaler backs the pool off",
                    f"leave maxNodeProvisionMinutes unset (aksgpu derives {derived.max_node_provision_minutes}), or set "
                    f"it to {derived.max_node_provision_minutes}", "warning")


def startup_timeline(spec: ClusterSpec, pool: NodePool) -> str:
    """The steps to a pool's verdict in minutes, for messages: 'node ready 1, ... check up to 10'."""
    parts = [f"{step.step} {step.seconds / 60:g}{' (assumed)' if step.assumption else ''}"
             for step in startup_steps(pool)]
    parts.append(f"check up to {spec.gpu_health.gate.timeout_seconds / 60:g}")
    return ", ".join(parts)
