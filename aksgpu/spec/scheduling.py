"""Who gets GPUs and when: headroom (balloons), spot-first scale-up (the priority expander), gang
scheduling (Kueue), and the InfiniBand rules that keep one job inside one fabric."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from aksgpu import catalog

from aksgpu.spec.base import Issue, SpecModel
from aksgpu.spec.in_cluster import Version, pinned

if TYPE_CHECKING:
    from aksgpu.spec import ClusterSpec
    from aksgpu.spec.pools import NodePool


class GangScheduling(SpecModel):
    """Kueue: team queues with GPU quotas, and all-or-nothing admission of multi-pod jobs."""

    enabled: bool = False
    """Install Kueue (Helm) with a ResourceFlavor per GPU pool flavor (model, spot or on-demand, team, InfiniBand domain), per team and node shape a ClusterQueue holding its share of the team's quota, and a LocalQueue gpu-<GPUs per node> in each team namespace. Needs access.teams."""
    kueue_version: Version = pinned("kueue")
    """Version of the Kueue chart (oci://registry.k8s.io/kueue/charts/kueue). aksgpu's tests check its values and CRDs at the pinned default."""
    pods_ready_timeout_minutes: int = Field(default=30, ge=1, le=1440)
    """Minutes (1-1440) an admitted job's pods have to all become ready before Kueue evicts the whole job and requeues it (waitForPodsReady), so two half-started gangs cannot deadlock. Leave room for new nodes: provisioning, the GPU Operator's driver and the node check (Kueue's own default is 30)."""
    topology: Literal["auto", "on", "off"] = "auto"
    """Which InfiniBand pools get a topology-aware Kueue flavor (a Topology of placement group, NVLink clique on GB200/GB300, and node), so a gang can ask for one InfiniBand domain and a failed node is replaced inside it. auto: pools of a fixed size (Kueue places such gangs only on nodes that exist, and AKS's cluster autoscaler cannot be asked for more ahead of them); on: every InfiniBand pool (an autoscaled one then never grows for a gang); off: none."""


# Kueue's ClusterQueue CRD (v0.19.2) takes at most 16 flavors per resource group.
MAX_FLAVORS_PER_QUEUE = 16


@dataclass(frozen=True)
class GpuFlavor:
    """GPU capacity that looks the same to a job (one Kueue ResourceFlavor): one VM size (the GPU
    model), spot or on-demand, one owning team (or none), the same extra taints, and, for
    InfiniBand sizes, one agent pool, since a gang must not span two InfiniBand domains."""

    name: str
    vm_size: str
    spot: bool
    team: str | None
    infiniband_pool: str | None
    members: tuple[tuple[str, NodePool], ...]
    """(AKS agent pool name, the spec pool it comes from)."""

    @property
    def pools(self) -> list[NodePool]:
        return list({id(pool): pool for _, pool in self.members}.values())

    @property
    def gpus_per_node(self) -> int:
        return self.members[0][1].gpus_per_node or 0

    def capacity(self) -> dict[str, Decimal]:
        """What the flavor's agent pools hold at full scale: vCPUs (cores), memory (bytes), GPUs."""
        gpus = cpus = memory = 0
        for _, pool in self.members:
            size = pool.size
            gpus += (pool.gpus_per_node or 0) * pool.max_nodes
            cpus += (size.vcpus if size else 0) * pool.max_nodes
            memory += (size.memory_gib if size else 0) * pool.max_nodes
        return {"cpu": Decimal(cpus), "memory": Decimal(memory) * 2**30, "nvidia.com/gpu": Decimal(gpus)}


def nvlink_domains(flavor: GpuFlavor) -> bool:
    """Whether the flavor's VMs are Grace Blackwell ones, whose GPUs span VMs over NVLink (an
    NVL72 rack): GPU Feature Discovery labels each node with its NVLink clique."""
    size = flavor.members[0][1].size
    return size is not None and size.series in catalog.load("vm_sizes")["graceBlackwell"]["series"]


def topology_aware(spec: ClusterSpec, flavor: GpuFlavor) -> bool:
    """Whether the flavor is one of Kueue's topology-aware ones (gangScheduling.topology): an
    InfiniBand pool's, when the mode says so. auto: only pools whose nodes all exist (a fixed size),
    because Kueue admits a topology-aware gang only onto running nodes and AKS's autoscaler takes
    no ProvisioningRequest (aksgpu/catalog/topology.yaml, noProvisioningRequest)."""
    mode = spec.gang_scheduling.topology
    if flavor.infiniband_pool is None or mode == "off":
        return False
    return mode == "on" or all(pool.min_nodes == pool.max_nodes for pool in flavor.pools)


def infiniband_domain_nodes(pool: NodePool) -> int:
    """Nodes one InfiniBand domain of the pool can hold: the pool's size, at most one placement
    group's default cap (aksgpu/catalog/topology.yaml, placementGroups)."""
    return min(pool.max_nodes, int(catalog.load("topology")["infiniband"]["placementGroupVms"]))


def gpu_flavors(spec: ClusterSpec) -> list[GpuFlavor]:
    """The GPU flavors of the spec's NVIDIA GPU pools, in pool order."""
    grouped: dict[tuple, list[tuple[str, NodePool]]] = {}
    for pool in spec.node_pools:
        if pool.gpu_vendor != "nvidia":
            continue
        infiniband = bool(pool.size and pool.size.infiniband)
        for zone_pool in pool.agent_pools():
            key = (pool.vm_size, pool.priority == "spot", pool.team, zone_pool.name if infiniband else None,
                   tuple(sorted(pool.taints)))
            grouped.setdefault(key, []).append((zone_pool.name, pool))
    flavors = []
    for (vm_size, spot, team, infiniband_pool, taints), members in grouped.items():
        parts = [vm_size.lower().removeprefix("standard_").replace("_", "-"), "spot" if spot else "ondemand",
                 *([team] if team else []), *([infiniband_pool] if infiniband_pool else [])]
        flavor = GpuFlavor("-".join(parts), vm_size, spot, team, infiniband_pool, tuple(members))
        if topology_aware(spec, flavor):
            # Kueue makes a topology-aware flavor's topologyName, node labels and tolerations
            # immutable (its ResourceFlavor CRD's rules, v0.19.2): a name of its own, carrying what
            # cannot change, makes a change a new flavor the queues switch to, never a refused update.
            digest = hashlib.sha256(json.dumps([nvlink_domains(flavor), list(taints)]).encode()).hexdigest()[:6]
            flavor = dataclasses.replace(flavor, name=f"{flavor.name}-tas-{digest}")
        flavors.append(flavor)
    return flavors


def check_scheduling(spec: ClusterSpec) -> Iterator[Issue]:
    yield from _check_expander(spec)
    yield from _check_balloons(spec)
    yield from _check_infiniband(spec)
    gang = spec.gang_scheduling
    if gang.enabled and not spec.in_cluster.enabled:
        yield Issue("gangScheduling.enabled", True, "Kueue is installed by the in-cluster layer",
                    "set inCluster.enabled: true, or gangScheduling.enabled: false")
    elif gang.enabled and not spec.access.teams:
        yield Issue("gangScheduling.enabled", True, "Kueue's queues are per team, and no team is declared",
                    "declare access.teams (each gets a ClusterQueue and a LocalQueue), or set "
                    "gangScheduling.enabled: false")
    if spec.in_cluster.enabled and spec.access.teams:  # the teams' quotas are the in-cluster layer's
        yield from _check_team_domains(spec, gpu_flavors(spec))
    if gang.enabled and spec.in_cluster.enabled and spec.access.teams:
        flavors = gpu_flavors(spec)
        names = [flavor.name for flavor in flavors]
        for name in sorted({n for n in names if names.count(n) > 1}):
            yield Issue("nodePools", name, "two GPU pools of one size, capacity and team with different extra "
                        "taints would give Kueue two flavors of the same name", "give the pools the same taints, "
                        "or different teams")
        for index, team in enumerate(spec.access.teams):
            usable = [flavor for flavor in flavors if flavor.team in (None, team.name)]
            if len(usable) > MAX_FLAVORS_PER_QUEUE:
                yield Issue(f"access.teams[{index}]", team.name,
                            f"the team may use {len(usable)} GPU flavors (pools that differ in size, capacity, "
                            f"team or InfiniBand domain), and a Kueue ClusterQueue takes at most "
                            f"{MAX_FLAVORS_PER_QUEUE}", "merge pools, or give some of them to other teams")
        yield from _check_topology(spec, flavors)


def spot_fallbacks(spec: ClusterSpec) -> list[tuple[NodePool, NodePool]]:
    """(spot pool, on-demand pool) pairs of the same GPU size: spot first, on-demand behind it."""
    return [(spot, regular) for spot in spec.node_pools for regular in spec.node_pools
            if spot.kind == "gpu" and regular.kind == "gpu" and spot.priority == "spot"
            and regular.priority == "regular" and spot.vm_size == regular.vm_size]


def _check_expander(spec: ClusterSpec) -> Iterator[Issue]:
    expander = spec.control_plane.autoscaler.expander
    path = "controlPlane.autoscaler.expander"
    if expander == "priority" and not spec.in_cluster.enabled:
        yield Issue(path, "priority", "the priority expander reads the ConfigMap cluster-autoscaler-priority-expander, "
                    "which aksgpu declares only with the in-cluster layer; without it the autoscaler picks pools "
                    "at random", "set inCluster.enabled: true, or choose another expander")
    elif expander != "priority" and spot_fallbacks(spec):
        spot, regular = spot_fallbacks(spec)[0]
        yield Issue(path, expander, f"{spot.name} (spot) and {regular.name} (on-demand) share a VM size, and only "
                    "the priority expander makes the autoscaler try the spot pool first and fall back to the "
                    "on-demand one", "set expander: priority (aksgpu then declares the priority ConfigMap)",
                    "warning")


def _check_balloons(spec: ClusterSpec) -> Iterator[Issue]:
    for index, pool in enumerate(spec.node_pools):
        if not pool.balloon_nodes:
            continue
        path = f"nodePools[{index}].balloonNodes"
        if not spec.in_cluster.enabled:
            yield Issue(path, pool.balloon_nodes, "balloons are pods, declared by the in-cluster layer",
                        "set inCluster.enabled: true, or balloonNodes: 0")
        capacity = pool.max_nodes * pool.zone_pool_count
        if pool.balloon_nodes > capacity:
            yield Issue(path, pool.balloon_nodes, f"the pool holds at most {capacity} node{'' if capacity == 1 else 's'}, so the extra balloons "
                        "would stay pending and keep the autoscaler asking for nodes it cannot add",
                        f"lower balloonNodes to {capacity} or less, or raise maxCount")
        elif not pool.autoscale:
            yield Issue(path, pool.balloon_nodes, "balloons hold headroom for the autoscaler; a fixed-size pool "
                        "has none to hold", "autoscale the pool (minCount and maxCount), or set balloonNodes: 0",
                        "warning")


def _check_infiniband(spec: ClusterSpec) -> Iterator[Issue]:
    """InfiniBand connects only the VMs of one scale set, which lives in one zone: a job's nodes must
    come from one pool, and the autoscaler must not spread a scale-up over look-alike pools."""
    infiniband = [(index, pool) for index, pool in enumerate(spec.node_pools)
                  if pool.size is not None and pool.size.infiniband]
    cap = catalog.load("topology")["infiniband"]
    for index, pool in infiniband:
        field = "maxCount" if pool.autoscale else "count"
        if pool.max_nodes > cap["placementGroupVmsOnRequest"]:
            # Past what Azure support can raise the cap to, the nodes can never exist: AKS stops the
            # pool at its one placement group, and every figure counted on them (cost, quota) is wrong.
            yield Issue(f"nodePools[{index}].{field}", pool.max_nodes,
                        f"AKS creates {pool.vm_size} pools as a single scale-set placement group (the one "
                        "InfiniBand connects), which holds at most "
                        f"{cap['placementGroupVmsOnRequest']} VMs even after an Azure support request, so the "
                        "pool can never reach this size",
                        f"declare one pool per {cap['placementGroupVms']} nodes (each its own InfiniBand domain, "
                        "with a distinct aksgpu.io/ib-domain label), or lower it to "
                        f"{cap['placementGroupVms']} ({cap['placementGroupVmsOnRequest']} after a support request)")
        elif pool.max_nodes > cap["placementGroupVms"]:
            yield Issue(f"nodePools[{index}].{field}", pool.max_nodes,
                        f"InfiniBand connects one scale-set placement group, and AKS creates {pool.vm_size} pools as "
                        f"a single placement group, which holds {cap['placementGroupVms']} VMs "
                        f"({cap['placementGroupVmsOnRequest']} after an Azure support request): beyond that the pool "
                        "either stops growing or spans placement groups that InfiniBand does not connect",
                        f"declare pools of at most {cap['placementGroupVms']} nodes (each its own InfiniBand domain), "
                        f"or ask Azure support to raise the cap (up to {cap['placementGroupVmsOnRequest']}); gangs on "
                        "topology-aware pools can ask for one placement group (aksgpu.io/placement-group)",
                        "warning")
        if len(pool.zones) > 1 and not pool.per_zone:
            yield Issue(f"nodePools[{index}].zones", list(pool.zones),
                        f"{pool.vm_size} nodes talk over InfiniBand only inside one scale set, and a pool over "
                        "several zones puts one job's nodes in different zones", "give the pool one zone "
                        '(zones: ["1"]); for more zones declare one pool per zone, each with its own label')
    if not spec.control_plane.autoscaler.balance_similar_node_groups:
        return
    seen: dict[tuple, str] = {}
    for index, pool in infiniband:
        for zone_pool in pool.agent_pools():
            shape = (pool.vm_size, tuple(sorted(pool.node_labels.items())), pool.priority)
            first = seen.setdefault(shape, zone_pool.name)
            if first != zone_pool.name:
                fix = ("set perZone: false and declare one pool per zone, each with a distinct label"
                       if pool.per_zone else f"give it a label that tells it apart, e.g. labels: "
                       f"{{aksgpu.io/ib-domain: {pool.name}}}")
                yield Issue(f"nodePools[{index}]", pool.name,
                            f'AKS pool "{zone_pool.name}" looks like "{first}" to the autoscaler (same InfiniBand '
                            "size and labels), and balanceSimilarNodeGroups would spread one job's scale-up over "
                            "both, across fabrics InfiniBand does not connect",
                            f"{fix}, or set controlPlane.autoscaler.balanceSimilarNodeGroups: false")
                break


def _check_topology(spec: ClusterSpec, flavors: list[GpuFlavor]) -> Iterator[Issue]:
    """What gangs on InfiniBand pools need of Kueue: a topology-aware flavor admits only onto nodes
    that exist, and a team's queue should not mix topology-aware flavors with others (a team's quota
    over one InfiniBand domain: _check_team_domains)."""
    if spec.gang_scheduling.topology == "on":
        for flavor in flavors:
            grows = [pool.name for pool in flavor.pools if pool.min_nodes != pool.max_nodes]
            if topology_aware(spec, flavor) and grows:
                yield Issue("gangScheduling.topology", "on",
                            f"pool {grows[0]} is autoscaled, and Kueue admits a topology-aware gang only onto nodes "
                            "that exist, and AKS's cluster autoscaler takes no ProvisioningRequest (Azure/AKS#5492) to "
                            "add nodes ahead of pods, so a gang larger than its running nodes waits and never "
                            "makes the pool grow", f"give {grows[0]} a fixed size (count), or set topology: auto",
                            "warning")
    for index, team in enumerate(spec.access.teams):
        queues: dict[int, list[GpuFlavor]] = {}
        for flavor in flavors:
            if flavor.team in (None, team.name):
                queues.setdefault(flavor.gpus_per_node, []).append(flavor)
        for gpus, queue in sorted(queues.items()):
            aware = sorted(str(f.infiniband_pool) for f in queue if topology_aware(spec, f))
            if aware and len(aware) < len(queue):
                others = sorted(f.name for f in queue if not topology_aware(spec, f))
                yield Issue(f"access.teams[{index}]", team.name,
                            f"the team's queue of {gpus}-GPU nodes mixes topology-aware flavors (pools "
                            f"{', '.join(aware)}) with others ({', '.join(others)}): Kueue gives a job with a "
                            "topology annotation only the first and a job without one only the others "
                            "(kueue v0.19.2 tas_flavorassigner.go)", "make the pools of one node shape alike "
                            "(all fixed-size for topology: auto, or topology: on or off), or annotate every job "
                            "that should use the topology-aware pools", "warning")


def _check_team_domains(spec: ClusterSpec, flavors: list[GpuFlavor]) -> Iterator[Issue]:
    """A team's GPU quota (access.teams[].quota.gpus: its ResourceQuota, and with gangScheduling its
    ClusterQueues) larger than one InfiniBand domain: one scale-set placement group, at most the pool's
    size and the group's cap (aksgpu/catalog/topology.yaml, placementGroups). Warned where the team can
    actually use more InfiniBand GPUs of one node shape than the largest domain holds, over several
    domains; with Kueue (podsets) and without it (the scheduler places pods one by one) alike."""
    from aksgpu.spec.access import team_gpu_quota

    for index, team in enumerate(spec.access.teams):
        shapes: dict[int, list[GpuFlavor]] = {}
        for flavor in flavors:
            if flavor.infiniband_pool is not None and flavor.team in (None, team.name):
                shapes.setdefault(flavor.gpus_per_node, []).append(flavor)
        quota = team_gpu_quota(spec, team)
        for gpus, domains in sorted(shapes.items()):
            if len(domains) < 2:  # one pool past a placement group: _check_infiniband warns on the pool itself
                continue
            sizes = {flavor.infiniband_pool: infiniband_domain_nodes(flavor.pools[0]) * gpus for flavor in domains}
            largest = max(sizes.values())
            if min(quota, sum(sizes.values())) <= largest:
                continue
            field = f"access.teams[{index}].quota.gpus"
            if spec.gang_scheduling.enabled:
                yield Issue(field, quota,
                            f"the team may use {len(domains)} InfiniBand domains of {gpus}-GPU nodes "
                            f"({', '.join(sorted(str(d) for d in sizes))}), the largest {largest} GPUs, and its quota "
                            f"is larger: Kueue keeps each podset in one flavor (one domain), but a job of several "
                            "podsets (a JobSet's replicated jobs) can be admitted across domains that InfiniBand "
                            "does not connect", f"keep each multi-node job within {largest} GPUs, or give its "
                            "podsets one kueue.x-k8s.io/podset-group-name on topology-aware pools "
                            "(gangScheduling.topology), which places the group in one domain", "warning")
            else:
                yield Issue(field, quota,
                            f"the team may use {len(domains)} InfiniBand domains of {gpus}-GPU nodes "
                            f"({', '.join(sorted(str(d) for d in sizes))}), the largest {largest} GPUs, and its quota "
                            "is larger; without gang scheduling the Kubernetes scheduler places each pod on its own, "
                            "so one job's pods can land in domains that InfiniBand does not connect",
                            f"keep each multi-node job within {largest} GPUs and pin it to one pool "
                            "(nodeSelector kubernetes.azure.com/agentpool), or set gangScheduling.enabled: true",
                            "warning")
