"""ClusterSpec: the single, validated description of an AKS GPU cluster.

It is read from the structured stack config key `aksgpu:cluster`. The CLI and the Pulumi
program both call `parse_cluster_spec`, so they accept and reject exactly the same specs with
the same messages. The spec is split by concern; each module holds its fields and the rules
that span them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Literal

from pydantic import Field, ValidationError

from aksgpu import catalog

from aksgpu.spec.access import Aad, Access, Team, TeamQuota, check_access, team_gpu_quota
from aksgpu.spec.base import (
    Issue,
    SpecError,
    SpecModel,
    check_policy_owned_tags,
    check_tag_count,
    check_tags,
    issues_from_validation_error,
)
from aksgpu.spec.control_plane import ApiServer, Autoscaler, ControlPlane, MaintenanceWindow, check_control_plane
from aksgpu.spec.fleet import FleetMembership
from aksgpu.spec.gpu_health import GpuHealth, check_gpu_health
from aksgpu.spec.in_cluster import GpuSoftware, InCluster, check_in_cluster
from aksgpu.spec.monitoring import LogAnalytics, Monitoring, check_monitoring
from aksgpu.spec.names import check_derived_names
from aksgpu.spec.network import Network, Subnet, Vnet, check_network
from aksgpu.spec.policy import PolicySettings, Waiver, check_policy
from aksgpu.spec.pool_checks import check_pools
from aksgpu.spec.pools import GpuSettings, NodePool, PoolBase, SpotSettings, SystemPool, ZonePool
from aksgpu.spec.promotion import PoolPins, Promotion, Snapshot, check_promotion
from aksgpu.spec.registry import Registry, check_registry, default_registry_name
from aksgpu.spec.scheduling import GangScheduling, check_scheduling, spot_fallbacks
from aksgpu.spec.security import KeyVaultSecretsProvider, Security, check_security
from aksgpu.spec.shared_fields import ClusterName, DnsPrefix, Location, ResourceGroupName, check_location
from aksgpu.stack_config import CLUSTER_KEY

__all__ = [
    "Aad", "Access", "ApiServer", "Autoscaler", "ClusterSpec", "ControlPlane", "FleetMembership", "GangScheduling",
    "GpuHealth",
    "GpuSettings", "GpuSoftware", "InCluster", "Issue", "KeyVaultSecretsProvider", "LogAnalytics",
    "MaintenanceWindow", "Monitoring", "Network", "NodePool", "PolicySettings", "PoolBase", "PoolPins", "Promotion",
    "Registry",
    "ResourceGroup", "Security", "Snapshot", "SpecError", "SpotSettings", "Subnet", "SystemPool", "Team", "TeamQuota",
    "Vnet",
    "Waiver", "ZonePool", "default_registry_name", "parse_cluster_spec",
    "spot_fallbacks", "team_gpu_quota",
]

class ResourceGroup(SpecModel):
    """The resource group of the cluster and its companions: created, or an existing one."""

    name: ResourceGroupName
    """Name of the resource group: 1-90 letters, digits, '-', '_', '.', '(' or ')', not ending in '.'. AKS puts the nodes in a second group, "<this name>-<cluster name>-nodes"."""
    create: bool = True
    """true: aksgpu creates the group (protected when `protect` is set); false: the group already exists and aksgpu only deploys into it."""


class ClusterSpec(SpecModel):
    """Everything aksgpu needs to declare one AKS GPU cluster."""

    name: ClusterName
    """Name of the AKS cluster: 1-63 letters, digits, '-' or '_', starting and ending with a letter or digit. It also names the cluster's identities and the default VNet, workspace and registry."""
    location: Location
    """Azure region of the cluster and every resource aksgpu creates, in lowercase without spaces, e.g. "eastus2"."""
    resource_group: ResourceGroup
    """The resource group that holds the cluster and its companions (VNet, registry, workspaces, identities)."""
    tags: dict[str, str] = Field(default_factory=dict)
    """Azure tags for every resource aksgpu creates; aksgpu adds managed-by: aksgpu. Tag names are 1-512 characters without <>%&\\?/, case-insensitive (each once), values at most 256. Azure allows 50 tags per resource counting aksgpu's own and policyOwnedTags, and 15 on the private DNS zone aksgpu creates for a registry without public access."""
    policy_owned_tags: list[str] = Field(default_factory=list)
    """Tag names Azure Policy adds or sets (Modify or Append effect), e.g. costCenter: every tagged resource ignores changes to them, so they are no drift. Not also in tags (aksgpu would set a value the policy overwrites)."""
    protect: bool = False
    """Protect the cluster, registry, workspaces, KMS vault and key, and resource group (when aksgpu creates them) from `pulumi destroy`."""
    dns_prefix: DnsPrefix | None = None
    """Prefix of the API server's DNS name: 1-54 letters, digits or '-', starting and ending with a letter or digit. None: derived from the cluster name. AKS cannot change it after the cluster is created."""
    node_pool_order: Literal["chained", "perSubnet"] = "chained"
    """chained: pools are created one after another (AKS refuses overlapping pool operations); perSubnet: pools on different subnets may be created in parallel."""
    control_plane: ControlPlane = ControlPlane()
    """Kubernetes version, tier, upgrade policy, API server access and cluster autoscaler settings."""
    system_pool: SystemPool = SystemPool()
    """The dedicated pool for the add-ons the cluster depends on (CoreDNS, konnectivity, metrics-server); it runs no user workloads by default."""
    node_pools: list[NodePool] = Field(default_factory=list)
    """The user pools for CPU and GPU work. At most 100 pools per cluster counting the system pool and each zone of a perZone pool, and at most 5,000 nodes counting every pool's maximum."""
    network: Network = Network()
    """CNI plugin, dataplane, network policy, pod and service ranges, outbound traffic and the VNet the nodes live in."""
    access: Access = Access()
    """Entra ID sign-in, Kubernetes or Azure RBAC, local accounts, workload identity and teams."""
    registry: Registry = Registry()
    """The Azure Container Registry the nodes pull from (the kubelet identity gets AcrPull on it)."""
    monitoring: Monitoring = Monitoring()
    """Log Analytics workspace, Container Insights, control-plane logs and managed Prometheus."""
    in_cluster: InCluster = InCluster()
    """Whether aksgpu declares Kubernetes objects in the cluster (GPU software, team namespaces, health gating, headroom, queues) and how its Kubernetes provider signs in."""
    gpu_software: GpuSoftware = GpuSoftware()
    """The software that advertises each GPU pool's GPUs: the NVIDIA device plugin (driver Install) or the GPU Operator (driver None)."""
    gpu_health: GpuHealth = GpuHealth()
    """DCGM metrics and alert rules, the check that gates new GPU nodes, and re-checks of idle ones."""
    gang_scheduling: GangScheduling = GangScheduling()
    """Kueue: per-team queues with GPU quotas and all-or-nothing admission of multi-pod jobs."""
    security: Security = Security()
    """Defender for Containers, the Azure Policy add-on, the Key Vault secrets provider, the image cleaner and run command."""
    policy: PolicySettings = PolicySettings()
    """Waivers of aksgpu's security policies (`aksgpu policy list`) for this environment, each with a reason."""
    fleet: FleetMembership | None = None
    """The fleet this cluster is a member of (written by `aksgpu render` for a fleet environment's members): the FleetMember joins it to the fleet, and registry or workspaces in mode fleet come from the fleet's shared stack. None: a cluster on its own."""
    promotion: Promotion | None = None
    """Health-gated promotion of the GPU pools' stack: the canary pool, the rules its gate verdicts are held to (`aksgpu promote`), and the node pool snapshots pools pin. None: no canary; pools pin nothing unless nodePools[].pins says so."""

    @property
    def effective_dns_prefix(self) -> str:
        return self.dns_prefix or re.sub(r"[^a-zA-Z0-9-]", "-", self.name)[:54].strip("-") or "aks"

    @property
    def all_pools(self) -> list[tuple[str, PoolBase]]:
        """(path, pool) for the system pool and every node pool."""
        pools: list[tuple[str, PoolBase]] = [("systemPool", self.system_pool)]
        pools += [(f"nodePools[{i}]", pool) for i, pool in enumerate(self.node_pools)]
        return pools

    @property
    def agent_pool_count(self) -> int:
        return 1 + sum(pool.zone_pool_count for pool in self.node_pools)

    @property
    def total_max_nodes(self) -> int:
        return sum(pool.max_nodes * pool.zone_pool_count for _, pool in self.all_pools)

    def issues(self) -> list[Issue]:
        """Every rule violation and warning of this spec, in a stable order."""
        found: list[Issue] = []
        for check in (_check_cluster, check_derived_names, check_control_plane, check_pools, check_network,
                      check_access, check_registry, check_monitoring, check_in_cluster, check_gpu_health,
                      check_scheduling, check_security, check_policy, check_promotion):
            found.extend(check(self))
        return found


def _check_cluster(spec: ClusterSpec) -> Iterator[Issue]:
    yield from check_location(spec.location)
    pools = spec.agent_pool_count
    if pools > catalog.limit("maxNodePools"):
        yield Issue("nodePools", pools, f"AKS allows at most {catalog.limit('maxNodePools')} node pools per cluster "
                    "(counting the system pool and each zone of a perZone pool)",
                    "merge pools, or split the fleet across clusters")
    nodes = spec.total_max_nodes
    if nodes > catalog.limit("maxNodesPerCluster"):
        yield Issue("nodePools", nodes, f"AKS allows at most {catalog.limit('maxNodesPerCluster')} nodes per cluster; "
                    "this is the sum of every pool's maximum", "lower maxCount of some pools")
    elif nodes > catalog.limit("freeTierMaxNodes") and spec.control_plane.tier == "Free":
        yield Issue("controlPlane.tier", "Free", f"the Free tier supports up to {catalog.limit('freeTierMaxNodes')} "
                    f"nodes and this cluster can reach {nodes}", "set controlPlane.tier: Standard or Premium")
    switches = catalog.limit("featureSwitchTags")
    for key in spec.tags:
        replacement = next((switches[name] for name in switches if name.lower() == key.lower()), None)
        if replacement is not None:
            yield Issue(f"tags.{key}", spec.tags[key], "aksgpu puts its tags on every node pool, and AKS has read this "
                        "node pool tag as a feature switch", f"remove the tag and use {replacement}", "warning")
    yield from check_tags(spec.tags, spec.policy_owned_tags)
    yield from check_policy_owned_tags(spec.tags, spec.policy_owned_tags)
    registry = spec.registry
    if registry.mode in ("create", "fleet") and not registry.public_network_access and not registry.private_dns_zone_id:
        # Azure Private DNS takes 15 tags (catalog azure_tags.yaml fewerTags), and aksgpu tags the zone it creates.
        yield from check_tag_count(spec.tags, spec.policy_owned_tags,
                                   catalog.load("azure_tags")["fewerTags"]["Microsoft.Network/privateDnsZones"]["limit"],
                                   "the private DNS zone privatelink.azurecr.io and its VNet link, which aksgpu creates "
                                   "for the registry's private endpoint", ", or give registry.privateDnsZoneId")


def parse_cluster_spec(raw: Any, source: str = CLUSTER_KEY) -> tuple[ClusterSpec, list[Issue]]:
    """Validate `raw` (the parsed `aksgpu:cluster` value).

    Returns the spec and its warnings; raises SpecError listing every error (and warning).
    Field errors (types, enums, patterns, ranges, unknown keys) are reported together first;
    the rules that relate fields need well-formed fields, so they run, all together, after.
    """
    if not isinstance(raw, dict):
        issue = Issue("(top level)", raw, "the cluster spec must be a mapping of fields",
                      f"write {CLUSTER_KEY} as a YAML mapping (name:, location:, resourceGroup:, ...)")
        raise SpecError([issue], source)
    try:
        spec = ClusterSpec.model_validate(raw)
    except ValidationError as error:
        raise SpecError(issues_from_validation_error(error, raw, ClusterSpec), source) from None
    issues = spec.issues()
    if any(issue.severity == "error" for issue in issues):
        raise SpecError(issues, source)
    return spec, issues
