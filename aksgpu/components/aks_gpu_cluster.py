"""AksGpuCluster: the whole cluster from one ClusterSpec, composed of one component per concern."""

from __future__ import annotations

import pulumi
from pulumi_azure_native import authorization, resources

from aksgpu.components.access import Access, AccessArgs, aad_profile
from aksgpu.components.cluster import Cluster, ClusterArgs
from aksgpu.components.fleet import FleetJoin, FleetJoinArgs, FleetOutputs
from aksgpu.components.kubernetes.dra import DraDriver, DraDriverArgs
from aksgpu.components.kubernetes.fabric import Fabric, FabricArgs
from aksgpu.components.kubernetes.gang_scheduling import (
    GangScheduling,
    GangSchedulingArgs,
)
from aksgpu.components.kubernetes.gpu_health import GpuHealth, GpuHealthArgs
from aksgpu.components.kubernetes.gpu_software import GpuSoftware, GpuSoftwareArgs
from aksgpu.components.kubernetes.headroom import Headroom, HeadroomArgs
from aksgpu.components.policy_tags import ignore_policy_tags
from aksgpu.components.kubernetes.provider import (
    ClusterKubernetes,
    ClusterKubernetesArgs,
)
from aksgpu.components.kubernetes.team_access import TeamAccess, TeamAccessArgs
from aksgpu.components.kubernetes.topology import NodeTopology, NodeTopologyArgs, labeller_targets
from aksgpu.components.monitoring import (
    ClusterMonitoring,
    ClusterMonitoringArgs,
    Monitoring,
    MonitoringArgs,
)
from aksgpu.components.network import Network, NetworkArgs
from aksgpu.components.node_pools import NodePools, NodePoolsArgs
from aksgpu.components.registry import Registry, RegistryArgs
from aksgpu.components.repair_identity import RepairIdentity, RepairIdentityArgs
from aksgpu.spec import ClusterSpec
from aksgpu.spec.base import AKSGPU_TAGS
from aksgpu.spec.in_cluster import is_grace_blackwell


class AksGpuCluster(pulumi.ComponentResource):
    """Network, monitoring workspaces, the cluster, its node pools, registry, access and
    cluster monitoring, wired in the order Azure needs them; then, with inCluster enabled, the
    in-cluster layer through a Kubernetes provider built from the cluster's credentials.

    The in-cluster objects wait for the cluster only, not for the node pools: they are in place
    (the GPU node gate among them) before the first GPU node joins.

    A fleet member (spec.fleet) is given its fleet's outputs (`fleet`, read from the fleet's
    shared stack): it joins the fleet, and its registry and workspaces in mode fleet are the fleet's.
    """

    def __init__(self, name: str, spec: ClusterSpec, opts: pulumi.ResourceOptions | None = None,
                 fleet: FleetOutputs | None = None) -> None:
        if spec.policy_owned_tags:  # children inherit it: every tagged Azure resource ignores them
            opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(
                transformations=[ignore_policy_tags(spec.policy_owned_tags)]))
        super().__init__("aksgpu:index:AksGpuCluster", name, None, opts)
        if spec.fleet is not None and fleet is None:
            raise ValueError(f"cluster {spec.name} is a member of fleet {spec.fleet.stack}: pass the fleet's outputs")
        child = pulumi.ResourceOptions(parent=self)
        tags = {**AKSGPU_TAGS, **spec.tags}
        spec = spec.model_copy(update={"tags": tags})
        if spec.resource_group.create:
            group = resources.ResourceGroup(
                f"{name}-rg", resource_group_name=spec.resource_group.name, location=spec.location, tags=tags,
                opts=pulumi.ResourceOptions(parent=self, protect=spec.protect))
            group_name: pulumi.Input[str] = group.name
        else:
            group_name = spec.resource_group.name
        client_config = authorization.get_client_config_output(opts=pulumi.InvokeOutputOptions(parent=self))
        subscription_id = client_config.subscription_id
        self._subscription_id = subscription_id

        vnet = spec.network.vnet
        node_subnets = sorted({pool.subnet or vnet.node_subnet for _, pool in spec.all_pools})
        self.network = Network(f"{name}-network", NetworkArgs(
            spec=spec.network, cluster_name=spec.name, location=spec.location, resource_group_name=group_name,
            node_subnets=node_subnets, api_server_subnet=spec.control_plane.api_server.subnet,
            api_server_private=spec.control_plane.api_server.access == "private",
            pod_subnets=sorted({subnet for _, pool in spec.all_pools
                                if (subnet := pool.pod_subnet or vnet.pod_subnet) is not None}),
            tags=tags), child)
        self.monitoring = Monitoring(f"{name}-monitoring", MonitoringArgs(
            spec=spec.monitoring, cluster_name=spec.name, location=spec.location, resource_group_name=group_name,
            protect=spec.protect, tags=tags,
            fleet_workspace_id=fleet.log_analytics_workspace_id(spec.location) if fleet else None,
            fleet_prometheus_workspace_id=fleet.prometheus_workspace_id if fleet else None), child)
        self.cluster = Cluster(f"{name}-cluster", ClusterArgs(
            spec=spec, resource_group_name=group_name, tenant_id=client_config.tenant_id,
            subscription_id=subscription_id, subnet_ids=self.network.subnet_ids,
            aad_profile=aad_profile(spec.access), workspace_id=self.monitoring.workspace_id,
            prometheus_enabled=self.monitoring.prometheus_workspace_id is not None), child)
        self.node_pools = NodePools(f"{name}-pools", NodePoolsArgs(
            spec=spec, resource_group_name=group_name, cluster_name=self.cluster.cluster_name,
            subnet_ids=self.network.subnet_ids, after=self.cluster.last_operation), child)
        self.registry = Registry(f"{name}-registry", RegistryArgs(
            spec=spec.registry, cluster_name=spec.name, location=spec.location, resource_group_name=group_name,
            kubelet_principal_id=self.cluster.kubelet_principal_id, subscription_id=subscription_id,
            protect=spec.protect, tags=tags, subnet_ids=self.network.subnet_ids, node_subnet=vnet.node_subnet,
            workspace_id=self.monitoring.workspace_id,
            fleet_registry_id=fleet.registry_id if fleet else None,
            fleet_login_server=fleet.registry_login_server if fleet else None), child)
        self.access = Access(f"{name}-access", AccessArgs(
            spec=spec.access, cluster_id=self.cluster.cluster_id, subscription_id=subscription_id), child)
        # A fleet's Azure Monitor workspace may be in another region: its collection endpoint, rule and
        # alert rule groups go there, as Microsoft's onboarding template puts them.
        self.prometheus_location = (fleet.prometheus_location
                                    if fleet and spec.monitoring.prometheus_workspace == "fleet" else None)
        self.cluster_monitoring = ClusterMonitoring(f"{name}-cluster-monitoring", ClusterMonitoringArgs(
            spec=spec.monitoring, cluster_name=spec.name, cluster_id=self.cluster.cluster_id, location=spec.location,
            resource_group_name=group_name, workspace_id=self.monitoring.workspace_id,
            prometheus_workspace_id=self.monitoring.prometheus_workspace_id, tags=tags,
            prometheus_location=self.prometheus_location), child)
        self.fleet_join: FleetJoin | None = None
        if spec.fleet is not None and fleet is not None:
            self.fleet_join = FleetJoin(f"{name}-fleet", FleetJoinArgs(
                fleet=fleet, member_name=spec.fleet.member, group=spec.fleet.group,
                cluster_id=self.cluster.cluster_id), child)
        self.kubernetes: ClusterKubernetes | None = None
        if spec.in_cluster.enabled:
            self._in_cluster(name, spec, group_name, tags)
        self.register_outputs({
            "clusterName": self.cluster.cluster_name,
            "clusterId": self.cluster.cluster_id,
        })

    def _in_cluster(self, name: str, spec: ClusterSpec, group_name: pulumi.Input[str], tags: dict[str, str]) -> None:
        child = pulumi.ResourceOptions(parent=self)
        self.kubernetes = ClusterKubernetes(f"{name}-kubernetes", ClusterKubernetesArgs(
            spec=spec, kubeconfig=self.cluster.kubeconfig), child)
        provider = self.kubernetes.provider
        namespace = self.kubernetes.system_namespace
        namespace_resource = self.kubernetes.namespace_resource
        self.gpu_software = GpuSoftware(f"{name}-gpu-software", GpuSoftwareArgs(
            spec=spec, provider=provider, system_namespace=namespace, namespace_resource=namespace_resource), child)
        # The NVIDIA DRA driver (ComputeDomains) only where multi-node NVLink exists: GB200/GB300 pools.
        self.dra_driver: DraDriver | None = None
        if any(is_grace_blackwell(pool) for pool in spec.node_pools):
            self.dra_driver = DraDriver(f"{name}-dra-driver", DraDriverArgs(
                spec=spec, provider=provider, gpu_operator=self.gpu_software.gpu_operator), child)
        self.team_access = TeamAccess(f"{name}-team-access", TeamAccessArgs(spec=spec, provider=provider), child)
        # The RDMA stack of the InfiniBand pools (nothing without such pools).
        self.fabric = Fabric(f"{name}-fabric", FabricArgs(
            spec=spec, provider=provider, namespaces=dict(self.team_access.namespaces)), child)
        # The repair loop's own identity in Azure, only where it acts (gpuHealth.repair mode act).
        repair = spec.gpu_health.repair
        self.repair_identity: RepairIdentity | None = None
        if repair.enabled and repair.mode == "act":
            self.repair_identity = RepairIdentity(f"{name}-gpu-repair", RepairIdentityArgs(
                spec=spec, resource_group_name=group_name, subscription_id=self._subscription_id,
                oidc_issuer_url=self.cluster.oidc_issuer_url, namespace=namespace, cluster=self.cluster.cluster), child)
        self.gpu_health = GpuHealth(f"{name}-gpu-health", GpuHealthArgs(
            spec=spec, provider=provider, system_namespace=namespace, namespace_resource=namespace_resource,
            resource_group_name=group_name, prometheus_workspace_id=self.monitoring.prometheus_workspace_id,
            gpu_operator=self.gpu_software.gpu_operator, tags=tags, prometheus_location=self.prometheus_location,
            repair_client_id=self.repair_identity.client_id if self.repair_identity else None,
            repair_cluster_id=self.repair_identity.cluster_id if self.repair_identity else None),
            child)
        self.headroom = Headroom(f"{name}-headroom", HeadroomArgs(
            spec=spec, provider=provider, system_namespace=namespace, namespace_resource=namespace_resource), child)
        if labeller_targets(spec):
            # Placement-group labels on the InfiniBand nodes: Kueue's topology levels, and for anyone's affinity.
            self.node_topology = NodeTopology(f"{name}-node-topology", NodeTopologyArgs(
                spec=spec, provider=provider, system_namespace=namespace, namespace_resource=namespace_resource),
                child)
        if spec.gang_scheduling.enabled:
            self.gang_scheduling = GangScheduling(f"{name}-gang-scheduling", GangSchedulingArgs(
                spec=spec, provider=provider, namespaces=dict(self.team_access.namespaces)), child)
