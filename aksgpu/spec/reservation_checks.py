"""Whether a pool's capacity reservation group covers what the pool can grow to: maxCount plus the
upgrade surge, per zone (NodePool.capacityReservations). Its rule runs in check_pools
(spec/pool_checks.py); the plan's capacity section (aksgpu/preflight/capacity.py) shows the same
figures from `reservation_needs`, so there is one place for them.

Sources (read 2026-11-27):
- AKS adds maxSurge nodes to each AgentPool during an upgrade, "a percentage of the total agent pool
  size at the time of the upgrade. For percentages, fractional nodes are rounded up" (AKS REST API
  AgentPoolUpgradeSettings.maxSurge, learn.microsoft.com/javascript/api/@azure-rest/arm-containerservice/
  agentpoolupgradesettings); surge nodes need capacity like any other ("AKS upgrades require extra
  compute capacity for surge nodes", azure-aks-docs upgrade-capacity-cost-planning.md). aksgpu's one
  computation of it is spec/base.py surge_nodes.
- A capacity reservation holds VMs of one size in one zone (or regionally); a pool whose nodes find
  no reserved VM left is served from on-demand capacity, which for GPU sizes may not be there
  (azure-aks-docs use-capacity-reservation-groups.md, ms.date 05/29/2026, as cited by the
  research note gpu-platform-anchors.md section 4: the reservation must also cover maxSurge).
- A scale set over several zones "performs a best effort approach to evenly spread instances across
  selected zones" (learn.microsoft.com/azure/virtual-machine-scale-sets/
  virtual-machine-scale-sets-use-availability-zones; balanced: each zone within one VM of the others,
  virtual-machine-scale-sets-zone-balancing): a multi-zone pool's even share (rounded up) is what each
  zone's reservation must hold for the group to cover the pool wherever its nodes land.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from aksgpu.spec.base import Issue, surge_nodes

if TYPE_CHECKING:
    from aksgpu.spec.pools import NodePool

REGIONAL = "regional"


def pool_peak(pool: NodePool) -> tuple[int, int]:
    """(maxCount or count, the upgrade surge AKS adds to it) of one AgentPool of the pool; spot pools get no surge."""
    nodes = pool.max_nodes
    return nodes, 0 if pool.is_spot else surge_nodes(pool.upgrade.max_surge, nodes)


def reservation_needs(pool: NodePool) -> dict[str, int]:
    """Reserved VMs each zone (or "regional") must hold so that the pool at maxCount plus surge runs on
    reserved capacity: per zone for a perZone pool (each zone's AgentPool surges on its own), the even
    share (rounded up) for a pool spread over zones, all of it for a regional pool."""
    nodes, surge = pool_peak(pool)
    peak = nodes + surge
    if not pool.zones:
        return {REGIONAL: peak}
    if pool.per_zone:
        return {zone: peak for zone in pool.zones}
    return {zone: -(-peak // len(pool.zones)) for zone in pool.zones}


def check_reservation(pool: NodePool, path: str) -> Iterator[Issue]:
    """capacityReservations: stated only with a group, and at least maxCount plus surge in the pool's zones."""
    reserved = {str(zone): count for zone, count in pool.capacity_reservations.items()}
    field = f"{path}.capacityReservations"
    if not reserved:
        return
    if pool.capacity_reservation_group_id is None:
        yield Issue(field, reserved, "states what a capacity reservation group reserves, and the pool names no group",
                    "set capacityReservationGroupId, or remove capacityReservations")
        return
    needs = reservation_needs(pool)
    nodes, surge = pool_peak(pool)
    scale = "maxCount" if pool.autoscale else "count"
    surge_text = f"upgrade.maxSurge {pool.upgrade.max_surge or '10% (AKS default)'}: {surge}"
    total_need = nodes + surge
    spread = len(pool.zones) > 1 and not pool.per_zone
    if spread:
        held = sum(reserved.get(zone, 0) for zone in pool.zones)
        if held < total_need:
            yield Issue(field, reserved, f"the group reserves {held} {pool.vm_size} in zones {', '.join(pool.zones)}, "
                        f"and the pool can reach {scale} {nodes} plus surge ({surge_text}) = {total_need} nodes: "
                        f"{total_need - held} would need on-demand capacity, which for GPU sizes may not be there",
                        f"reserve at least {needs[pool.zones[0]]} per zone ({total_need} in all), or lower {scale}")
            return
    for zone, need in needs.items():
        if reserved.get(zone, 0) >= need:
            continue
        where = "regionally" if zone == REGIONAL else f"in zone {zone}"
        if spread:  # covered in total, short in one zone: the spread is best effort
            yield Issue(f"{field}.{zone}", reserved.get(zone, 0), f"the group reserves {reserved.get(zone, 0)} "
                        f"{pool.vm_size} {where}, less than the even share ({need}) of {total_need} nodes "
                        f"({scale} {nodes} plus surge) a scale set spreads over {len(pool.zones)} zones",
                        f"reserve {need} in each zone", "warning")
            continue
        yield Issue(f"{field}.{zone}", reserved.get(zone, 0), f"the group reserves {reserved.get(zone, 0)} "
                    f"{pool.vm_size} {where}, and the pool's AgentPool there can reach {scale} {nodes} plus surge "
                    f"({surge_text}) = {need} nodes: the rest would need on-demand capacity",
                    f"reserve at least {need} {where}, or lower {scale} or upgrade.maxSurge")
    unused = sorted(set(reserved) - set(needs))
    if unused:
        yield Issue(field, reserved, f"reservations in {', '.join(unused)} are outside the pool's zones "
                    f"({', '.join(needs)}), so the pool never uses them", "list the pool's zones only", "warning")
