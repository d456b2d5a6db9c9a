"""The cost estimate of a ClusterSpec: per AKS pool at its fewest, typical and most nodes, the
fixed parts (control plane, registry, workspace ingestion, outbound, private endpoints, keys),
and totals, all from a dated price table (prices.py). A price the table lacks is listed as
missing and never counted as 0; usage nobody can know in advance (data processed, log volume,
key operations) is listed as not estimated.

Typical scale: a fixed-size pool's count; an autoscaled pool's minimum plus half the way to its
maximum, rounded up (min 0, max 20: 10). Spot pools are priced at the spot price, regular pools
at the pay-as-you-go price. A month is the table's hoursPerMonth (730).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aksgpu import catalog
from aksgpu.preflight.prices import PriceTable

if TYPE_CHECKING:
    from aksgpu.spec import ClusterSpec, PoolBase
    from aksgpu.spec.fleet import FleetSpec

TYPICAL_RULE = "typical = a fixed pool's count, or an autoscaled pool's min + half of (max - min), rounded up"
P10_GIB = (65, 128)  # OS disk sizes a Premium SSD P10 (128 GiB) serves; P6 and smaller are unpriced


@dataclass(frozen=True)
class Scale:
    """A value at the pool's fewest, typical and most nodes."""

    min: float
    typical: float
    max: float

    def __add__(self, other: Scale) -> Scale:
        return Scale(self.min + other.min, self.typical + other.typical, self.max + other.max)

    def times(self, factor: float) -> Scale:
        return Scale(self.min * factor, self.typical * factor, self.max * factor)

    @staticmethod
    def flat(value: float) -> Scale:
        return Scale(value, value, value)

    def json(self, digits: int) -> dict[str, float]:
        return {"min": round(self.min, digits), "typical": round(self.typical, digits),
                "max": round(self.max, digits)}


ZERO = Scale.flat(0.0)


@dataclass(frozen=True)
class PoolCost:
    name: str  # the AKS pool (one per zone for a perZone pool)
    vm_size: str
    priority: str  # regular | spot
    nodes: Scale
    on_demand: float | None  # per node-hour, from the table
    spot: float | None
    os_disk: float  # per node-hour (0: ephemeral, or not estimated)

    @property
    def node_hour(self) -> float | None:
        """What one node costs an hour at the pool's priority (VM plus a managed OS disk)."""
        price = self.spot if self.priority == "spot" else self.on_demand
        return None if price is None else price + self.os_disk

    @property
    def hourly(self) -> Scale | None:
        return None if self.node_hour is None else self.nodes.times(self.node_hour)


@dataclass(frozen=True)
class FixedCost:
    key: str
    label: str  # what it is and how many, e.g. "control plane, Premium tier"
    hourly: Scale | None  # None: no price in the table
    source: str | None


@dataclass
class CostEstimate:
    region: str
    table: PriceTable
    pools: list[PoolCost] = field(default_factory=list)
    fixed: list[FixedCost] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    not_estimated: list[str] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.missing

    @property
    def hourly(self) -> Scale:
        """The sum of everything priced (an incomplete estimate is a lower bound)."""
        total = ZERO
        for part in [p.hourly for p in self.pools] + [f.hourly for f in self.fixed]:
            total = total + part if part is not None else total
        return total

    @property
    def monthly(self) -> Scale:
        return self.hourly.times(self.table.hours_per_month)

    def json(self) -> dict[str, Any]:
        hours = self.table.hours_per_month
        return {
            "currency": self.table.currency, "hoursPerMonth": self.table.raw.get("hoursPerMonth", 730),
            "region": self.region,
            "priceTable": {"date": self.table.date, "path": None if self.table.shipped else self.table.path,
                           "shipped": self.table.shipped,
                           "source": self.table.raw.get("source")},
            "pools": [_pool_json(pool, hours) for pool in self.pools],
            "fixed": [{"key": f.key, "label": f.label, "source": f.source,
                       "hourly": None if f.hourly is None else f.hourly.json(4),
                       "monthly": None if f.hourly is None else f.hourly.times(hours).json(2)} for f in self.fixed],
            "total": {"hourly": self.hourly.json(4), "monthly": self.monthly.json(2), "complete": self.complete},
            "missing": self.missing, "notEstimated": self.not_estimated, "assumptions": self.assumptions,
        }


def _pool_json(pool: PoolCost, hours: float) -> dict[str, Any]:
    hourly = pool.hourly
    return {"name": pool.name, "vmSize": pool.vm_size, "priority": pool.priority, "nodes": pool.nodes.json(0),
            "onDemandPerNodeHour": pool.on_demand, "spotPerNodeHour": pool.spot,
            "osDiskPerNodeHour": round(pool.os_disk, 6), "perNodeHour": pool.node_hour,
            "hourly": None if hourly is None else hourly.json(4),
            "monthly": None if hourly is None else hourly.times(hours).json(2)}


def typical_nodes(low: int, high: int) -> int:
    return low + (high - low + 1) // 2


def estimate(spec: ClusterSpec, table: PriceTable) -> CostEstimate:
    """The cost of `spec` at the prices of `table`."""
    found = CostEstimate(spec.location, table)
    found.assumptions.append(TYPICAL_RULE)
    found.assumptions.append(f"a month is {table.hours_per_month:g} hours; list prices in {table.currency}, "
                             "Linux pay-as-you-go, no reservations, savings plans or discounts")
    _pool_costs(spec, table, found)
    for part in (_control_plane, _registry, _workspace, _outbound, _private_endpoints, _keys):
        part(spec, table, found)
    return found


def _pool_costs(spec: ClusterSpec, table: PriceTable, found: CostEstimate) -> None:
    entries: list[tuple[str, PoolBase, str]] = [(spec.system_pool.name, spec.system_pool, "regular")]
    entries += [(zone_pool.name, pool, pool.priority) for pool in spec.node_pools for zone_pool in pool.agent_pools()]
    unsized: dict[str, list[str]] = {}
    for name, pool, priority in entries:
        nodes = Scale(pool.min_nodes, typical_nodes(pool.min_nodes, pool.max_nodes), pool.max_nodes)
        price = table.vm(pool.vm_size, spec.location)
        on_demand, spot = (price.on_demand, price.spot) if price else (None, None)
        if (spot if priority == "spot" else on_demand) is None:
            kind = "spot" if priority == "spot" else "pay-as-you-go"
            found.missing.append(f"no {kind} price for {pool.vm_size} in {spec.location} ({table.label()}): "
                                 f"pool {name} not counted")
        disk, unpriced = _os_disk(name, pool, table, found)
        if unpriced:
            unsized.setdefault(unpriced, []).append(name)
        found.pools.append(PoolCost(name, pool.vm_size, priority, nodes, on_demand, spot, disk))
    for reason, names in unsized.items():
        found.not_estimated.append(f"OS disks of {', '.join(names)}: {reason}")


def _os_disk(name: str, pool: PoolBase, table: PriceTable, found: CostEstimate) -> tuple[float, str | None]:
    """A managed OS disk's price per node-hour (0 for an ephemeral one), and why it has none."""
    if pool.os_disk_type == "Ephemeral":
        return 0.0, None
    size = pool.os_disk_size_gb
    if pool.os_disk_type == "Managed" and size is not None and P10_GIB[0] <= size <= P10_GIB[1]:
        price = table.fixed("managedDiskP10")
        if price is not None:
            found.assumptions.append(f"pool {name}: its managed {size} GiB OS disk priced as a Premium SSD P10")
            return price / table.hours_per_month, None
    if pool.os_disk_type is None:
        return 0.0, "osDiskType unset, so AKS chooses ephemeral or managed"
    return 0.0, f"no price in the table for a managed OS disk of {size or 'the default'} GiB"


def _add(found: CostEstimate, table: PriceTable, key: str, label: str, per_hour: Scale | None,
         what: str | None = None) -> None:
    """One fixed part; a part whose price is null is listed as missing too."""
    if per_hour is None:
        found.missing.append(f"no price for {what or label} in {found.region} ({table.label()})")
    found.fixed.append(FixedCost(key, label, per_hour, table.fixed_source(key)))


def _per_hour(table: PriceTable, key: str, count: float = 1, per: float = 1) -> Scale | None:
    price = table.fixed(key)
    return None if price is None else Scale.flat(price * count / per)


def _control_plane(spec: ClusterSpec, table: PriceTable, found: CostEstimate) -> None:
    tier = spec.control_plane.tier
    key = f"aksTier{tier}"
    _add(found, table, key, f"control plane, {tier} tier", _per_hour(table, key), f"the AKS {tier} tier")
    if tier == "Free":
        found.assumptions.append("Free tier: $0 per Microsoft Learn; one unverified report (2026-10-01) saw a "
                                 "$0.05/h meter for it: check online")
    if tier == "Premium":
        found.assumptions.append("Premium tier: $0.60/h from a third-party quote of the Retail Prices API "
                                 "(weak source; not on a Microsoft page)")


def _registry(spec: ClusterSpec, table: PriceTable, found: CostEstimate) -> None:
    registry = spec.registry
    if registry.mode != "create":
        if registry.mode == "existing":
            found.assumptions.append("the existing registry is not counted (it is billed where it lives)")
        if registry.mode == "fleet":
            found.assumptions.append("the fleet's registry is counted with the fleet's shared stack, not here")
        return
    key = f"acr{registry.sku}"
    _add(found, table, key, f"container registry, {registry.sku} SKU", _per_hour(table, key, per=24),
         f"an ACR {registry.sku} registry")


def _workspace(spec: ClusterSpec, table: PriceTable, found: CostEstimate) -> None:
    monitoring = spec.monitoring
    if monitoring.log_analytics.mode == "none":
        return
    if monitoring.log_analytics.mode == "fleet":
        found.assumptions.append("ingestion into the fleet's workspace is counted here, where the data comes from")
    if monitoring.container_insights:
        facts = table.assumption("containerInsights")
        gb_per_node_hour = float(facts["clusterMbPerHour"]) / float(facts["clusterNodes"]) / 1000
        price = table.fixed("logAnalyticsGb")
        nodes = ZERO
        for pool in found.pools:
            nodes = nodes + pool.nodes
        hourly = None if price is None else nodes.times(gb_per_node_hour * price)
        _add(found, table, "logAnalyticsGb", "workspace ingestion (Container Insights metrics and inventory)",
             hourly, "Log Analytics ingestion")
        found.assumptions.append(
            f"workspace ingestion: {facts['clusterMbPerHour']} MB/hour per {facts['clusterNodes']} nodes "
            "(Microsoft's Container Insights example: metrics and inventory, no container logs), scaled by "
            "node count, at the West Europe pay-as-you-go price per GB")
        found.not_estimated.append("container logs (stdout/stderr) in the workspace: volume depends on the workloads")
    if monitoring.control_plane_logs:
        found.not_estimated.append(f"control-plane logs ({len(monitoring.control_plane_logs)} categories) in the "
                                   "workspace: volume unknown")
    if monitoring.managed_prometheus:
        found.not_estimated.append("managed Prometheus ingestion (per 10 million samples): volume unknown")


def _outbound(spec: ClusterSpec, table: PriceTable, found: CostEstimate) -> None:
    net = spec.network
    if net.outbound == "userAssignedNATGateway" and net.vnet.mode != "create":
        found.assumptions.append("the NAT gateway on existing subnets is not counted (aksgpu does not create it)")
        return
    if net.outbound != "loadBalancer":
        _add(found, table, "natGateway", "NAT gateway", _per_hour(table, "natGateway"), "a NAT gateway")
        found.not_estimated.append("NAT gateway data processed (per GB): traffic unknown")
    else:
        found.not_estimated.append("load balancer rules and data processed: not in the estimate")
    ips = net.outbound_ips
    _add(found, table, "publicIp", f"{ips} outbound public IP{'s' if ips != 1 else ''}",
         _per_hour(table, "publicIp", count=ips), "a Standard public IP")


def _private_endpoints(spec: ClusterSpec, table: PriceTable, found: CostEstimate) -> None:
    endpoints = []
    if spec.registry.mode in ("create", "fleet") and not spec.registry.public_network_access:
        endpoints.append("registry" if spec.registry.mode == "create" else "the fleet's registry")
    api = spec.control_plane.api_server
    if api.access == "private" and not api.vnet_integration:
        endpoints.append("API server")
    if spec.security.kms.mode != "none" and spec.security.kms.network_access == "Private":
        endpoints.append("KMS key vault (AKS creates it)")
    if endpoints:
        _add(found, table, "privateEndpoint", f"{len(endpoints)} private endpoint{'s' if len(endpoints) > 1 else ''} "
             f"({', '.join(endpoints)})", _per_hour(table, "privateEndpoint", count=len(endpoints)),
             "a private endpoint")
        found.not_estimated.append("private endpoint data processed (per GB): traffic unknown")


def _keys(spec: ClusterSpec, table: PriceTable, found: CostEstimate) -> None:
    kms = spec.security.kms
    if kms.mode != "create":
        return
    found.not_estimated.append("Key Vault operations (per 10,000): count unknown")
    if not kms.hsm:
        return
    keys = 1 + (spec.security.disk_encryption.mode == "create")
    size = catalog.limit("kms")["keySize"]
    key = f"keyVaultHsmKey{size}"
    _add(found, table, key, f"{keys} HSM key{'s' if keys > 1 else ''} (RSA-HSM {size})",
         _per_hour(table, key, count=keys, per=table.hours_per_month), f"an RSA-HSM {size} key")


# Fleet Manager tries these sizes for the hub's one node, in order (quickstart-create-fleet-and-members.md,
# MicrosoftDocs/azure-aks-docs@fb060abe, ms.date 2026-07-24).
FLEET_HUB_DEFAULT_VM = "Standard_D4s_v4"


def fleet_estimate(spec: FleetSpec, table: PriceTable) -> CostEstimate:
    """The fleet's shared parts: the registry and its replicas, and the hub when there is one. The
    fleet itself and hubless update runs cost nothing (Fleet Manager FAQ); the workspaces are
    billed by ingestion, which each member's estimate counts."""
    found = CostEstimate(spec.location, table)
    if spec.registry.mode == "create":
        replicas = [region for region in spec.member_regions if region != spec.location]
        _add(found, table, "acrPremium", f"container registry, Premium SKU, home region {spec.location}",
             _per_hour(table, "acrPremium", per=24), "an ACR Premium registry")
        if replicas:
            _add(found, table, "acrPremium", f"registry geo-replicas: {', '.join(replicas)}",
                 _per_hour(table, "acrPremium", count=len(replicas), per=24), "an ACR geo-replica")
            found.assumptions.append("each geo-replica is billed at the Premium registry's daily rate, and "
                                     "replicated storage and transfer are extra (ACR geo-replication docs)")
    if spec.hub.enabled:
        _add(found, table, "aksTierStandard", "Fleet Manager hub: its control plane (Standard tier)",
             _per_hour(table, "aksTierStandard"), "the AKS Standard tier")
        size = spec.hub.vm_size or FLEET_HUB_DEFAULT_VM
        price = table.vm(size, spec.location)
        hourly = None if price is None or price.on_demand is None else Scale.flat(price.on_demand)
        found.fixed.append(FixedCost(f"vm:{size}", f"Fleet Manager hub: its one node, {size}", hourly,
                                     None if price is None else price.source))
        if hourly is None:
            found.missing.append(f"no pay-as-you-go price for {size} (the hub's node) in {spec.location} "
                                 f"({table.label()})")
        found.assumptions.append("the hub is a single-node Standard-tier AKS cluster billed as such; Fleet Manager "
                                 "itself states no fee (Fleet Manager FAQ)")
    else:
        found.assumptions.append("hubless fleet: update runs, strategies and auto-upgrade profiles cost nothing "
                                 "(Fleet Manager FAQ)")
    if spec.prometheus:
        found.not_estimated.append("managed Prometheus ingestion into the fleet's workspace: volume unknown")
    return found
