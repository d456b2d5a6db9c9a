"""Fabric: RDMA over InfiniBand on every InfiniBand GPU pool, as Azure documents it for AKS.

Azure's guide (Azure/aks-rdma-infiniband @700dabb4fe04, website/docs/configurations/
01-network-operator.md and 02-gpu-drivers.md) installs the NVIDIA Network Operator (Helm) in a
namespace with Pod Security "privileged", and a NicClusterPolicy with the DOCA-OFED driver
container and the RDMA shared device plugin (rdma/shared_ib). aksgpu declares the same, from the
spec, only when the cluster has InfiniBand GPU pools:

- the operator (a Deployment) on the critical-system pool;
- node feature discovery (NFD), which must label the InfiniBand nodes
  `feature.node.kubernetes.io/pci-15b3.present=true` (the operator deploys its operands only there:
  pkg/nodeinfo/attributes.go NodeLabelMlnxNIC, controllers/nicclusterpolicy_controller.go at
  v26.4.1). Pools with gpu.driver None already run the GPU Operator's NFD worker, whose config
  labels PCI class 0207 (InfiniBand) by vendor (gpu-operator v26.7.0 values.yaml); a cluster runs
  one NFD worker per node, so the Network Operator's own NFD runs only on InfiniBand pools with
  driver Install, and labels InfiniBand controllers only (class 0207): never the NVIDIA GPU
  (pci-10de), which would draw the GPU Operator onto pools whose driver AKS installs. The chart's
  default NodeFeatureRule (vendor 15b3, Ethernet class too: the Azure accelerated-networking VF of
  every node) is off, as in Azure's values (configs/values/network-operator/values.yaml);
- the NicClusterPolicy "nic-cluster-policy" (the only name the operator reconciles:
  pkg/consts/consts.go NicClusterPolicyResourceName) with node affinity on the InfiniBand pools'
  agent pool label, their taints tolerated (and the GPU gate's, so the RDMA devices are there when
  the gate checks the node);
- in each team namespace that may use an InfiniBand size, a ConfigMap with the size's NCCL
  environment, and one with Azure's topology file where one is published
  (aksgpu/catalog/fabric.yaml, aksgpu/spec/fabric.py).

GPUDirect RDMA: on driver None pools through DMA-BUF, which NVIDIA recommends and which needs no
GPU Operator setting (its driver.kernelModuleType "auto" picks the open kernel module for current
drivers). aksgpu does not set driver.rdma.enabled as Azure's guide does: the ClusterPolicy is
cluster-wide, and with it the operator's validator makes the driver wait for a DOCA-OFED driver on
every node NFD labels pci-15b3 (gpu-operator v26.7.0 cmd/nvidia-validator/main.go MOFED.validate),
which a driver None pool without InfiniBand but with a Mellanox Ethernet VF never gets. On driver
Install pools GPUDirect RDMA is not set up by aksgpu: the spec warns (spec/fabric.py check_fabric).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from aksgpu import catalog
from aksgpu.components.kubernetes.objects import (
    PoolTarget,
    metadata,
    pool_affinity,
    pool_targets,
    pool_tolerations,
    system_pool_placement,
)
from aksgpu.spec import ClusterSpec, Team
from aksgpu.spec.fabric import TOPOLOGY_KEY, FabricProfile, fabric_profile, fabric_table, infiniband_pools, pool_driver

NETWORK_OPERATOR_NAMESPACE = "network-operator"  # Azure's guide: `kubectl create ns network-operator`
NETWORK_OPERATOR_RELEASE = "network-operator"
NIC_CLUSTER_POLICY_API = "mellanox.com/v1alpha1"
NIC_CLUSTER_POLICY = "nic-cluster-policy"
# PCI class of InfiniBand controllers: the HCAs of the ND sizes (class 0x020700 in Azure's
# topology files, aksgpu/catalog/nccl_topology/).
INFINIBAND_PCI_CLASS = "0207"


@dataclass
class FabricArgs:
    spec: ClusterSpec
    provider: k8s.Provider
    # Team namespaces (TeamAccess): each NCCL ConfigMap waits for its namespace.
    namespaces: dict[str, pulumi.Resource]


def fabric_targets(spec: ClusterSpec) -> list[PoolTarget]:
    """Every agent pool of the InfiniBand GPU pools."""
    pools = {id(pool) for pool in infiniband_pools(spec)}
    return pool_targets(spec, lambda pool: id(pool) in pools)


def nfd_targets(spec: ClusterSpec) -> list[PoolTarget]:
    """The InfiniBand agent pools the Network Operator's own NFD worker must run on: those no GPU
    Operator NFD worker covers (driver Install)."""
    return [target for target in fabric_targets(spec) if pool_driver(target.pool) == "Install"]


def network_operator_values(spec: ClusterSpec) -> dict[str, Any]:
    """Values of the network-operator chart (keys of its values.yaml at v26.4.1)."""
    placement = system_pool_placement()
    targets = nfd_targets(spec)
    values: dict[str, Any] = {
        # The operator, and the chart's pre-install/upgrade hook Jobs, which take the same placement
        # (templates/operator.yaml, upgrade-crd-hook.yaml, keep-ncp-hook.yaml): a hook that cannot be
        # scheduled would hold the install.
        "operator": {"nodeSelector": placement["nodeSelector"], "tolerations": placement["tolerations"]},
        # aksgpu's NFD workers label the InfiniBand nodes; the chart's rule would match the
        # Ethernet VF of every node (templates/nodefeaturerules.yaml: vendor 15b3, class 0200 or 0207).
        "nfd": {"enabled": bool(targets), "deployNodeFeatureRules": False},
    }
    if targets:
        values["node-feature-discovery"] = {
            "worker": {
                "tolerations": pool_tolerations(targets, gate=spec.gpu_health.gate.enabled),
                "affinity": pool_affinity(targets),
                # Only InfiniBand controllers, labelled by vendor: pci-15b3.present, not pci-10de.
                "config": {"sources": {"pci": {"deviceClassWhitelist": [INFINIBAND_PCI_CLASS],
                                               "deviceLabelFields": ["vendor"]}}},
            },
            "master": {"nodeSelector": placement["nodeSelector"], "tolerations": placement["tolerations"]},
            "gc": {"nodeSelector": placement["nodeSelector"], "tolerations": placement["tolerations"]},
        }
    return values


def rdma_shared_device_plugin_config() -> dict[str, Any]:
    """The plugin's configuration (k8s-rdma-shared-dev-plugin configList), as Azure writes it."""
    rdma = fabric_table()["rdma"]
    return {"configList": [{
        "resourceName": rdma["resourceName"],
        "rdmaHcaMax": int(rdma["hcaMax"]),
        "selectors": {"vendors": list(rdma["vendors"]), "linkTypes": list(rdma["linkTypes"])},
    }]}


def _pinned(component: str) -> dict[str, str]:
    entry = catalog.load("in_cluster")[component]
    return {"repository": entry["repository"], "image": entry["image"], "version": str(entry["version"])}


def nic_cluster_policy(spec: ClusterSpec) -> dict[str, Any]:
    """The NicClusterPolicy: the DOCA-OFED driver and the RDMA shared device plugin on the InfiniBand pools."""
    targets = fabric_targets(spec)
    return {
        "apiVersion": NIC_CLUSTER_POLICY_API,
        "kind": "NicClusterPolicy",
        "metadata": metadata(NIC_CLUSTER_POLICY),
        "spec": {
            "nodeAffinity": pool_affinity(targets)["nodeAffinity"],
            "tolerations": pool_tolerations(targets, gate=spec.gpu_health.gate.enabled),
            # As Azure's configs/nicclusterpolicy/base/nic.yaml, at the release's own driver version.
            "ofedDriver": {
                **_pinned("docaDriver"),
                # Azure's workaround for a race where the kernel module fails to load
                # (Mellanox/doca-driver-build#52, cited in nic.yaml).
                "env": [{"name": "OFED_BLACKLIST_MODULES_FILE",
                         "value": "/host/etc/modprobe.d/blacklist-ofed-modules.conf"}],
                "forcePrecompiled": False,
                "upgradePolicy": {"autoUpgrade": True, "maxParallelUpgrades": 1,
                                  "drain": {"enable": True, "force": True, "deleteEmptyDir": True,
                                            "timeoutSeconds": 300}},
                "startupProbe": {"initialDelaySeconds": 10, "periodSeconds": 20},
                "livenessProbe": {"initialDelaySeconds": 30, "periodSeconds": 30},
                "readinessProbe": {"initialDelaySeconds": 10, "periodSeconds": 30},
            },
            "rdmaSharedDevicePlugin": {
                **_pinned("rdmaSharedDevicePlugin"),
                "config": json.dumps(rdma_shared_device_plugin_config(), indent=2, sort_keys=True),
            },
        },
    }


def team_fabric_sizes(spec: ClusterSpec, team: Team) -> list[FabricProfile]:
    """The InfiniBand sizes a team may run on: its own pools' and those no team owns (the pools
    its Kueue flavors and its tolerations reach: gang_scheduling.team_flavors)."""
    sizes = sorted({pool.vm_size for pool in infiniband_pools(spec) if pool.team in (None, team.name)})
    return [profile for size in sizes if (profile := fabric_profile(size)) is not None]


def nccl_config_maps(spec: ClusterSpec, team: Team) -> list[dict[str, Any]]:
    """Per InfiniBand size the team may use: the NCCL environment (for envFrom with prefix NCCL_) and, where Azure
    publishes one, the topology file (mounted where NCCL_TOPO_FILE points)."""
    found = []
    for profile in team_fabric_sizes(spec, team):
        found.append({"metadata": metadata(profile.nccl_config_map, team.name), "data": profile.nccl_config_map_data})
        xml = profile.topology_xml()
        if profile.topology_config_map and xml is not None:
            found.append({"metadata": metadata(profile.topology_config_map, team.name), "data": {TOPOLOGY_KEY: xml}})
    return found


class Fabric(pulumi.ComponentResource):
    """The Network Operator, its NicClusterPolicy, and the teams' NCCL ConfigMaps (InfiniBand pools only)."""

    # A k8s.helm.v3.Release (see GpuSoftware.gpu_operator for why it is typed by its base class).
    network_operator: pulumi.CustomResource | None

    def __init__(self, name: str, args: FabricArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("aksgpu:index:Fabric", name, None, opts)
        spec = args.spec
        self.network_operator = None
        if not infiniband_pools(spec):
            self.register_outputs({})
            return
        base = pulumi.ResourceOptions(parent=self, provider=args.provider)
        namespace = k8s.core.v1.Namespace(
            f"{name}-network-operator-namespace",
            # Its operands load kernel modules and mount host paths (Azure's guide labels it so).
            metadata=metadata(NETWORK_OPERATOR_NAMESPACE,
                              extra_labels={"pod-security.kubernetes.io/enforce": "privileged"}),
            opts=base)
        chart = catalog.load("in_cluster")["networkOperator"]
        self.network_operator = k8s.helm.v3.Release(
            f"{name}-network-operator",
            name=NETWORK_OPERATOR_RELEASE,
            chart=chart["chart"],
            version=spec.gpu_software.network_operator.chart_version,
            repository_opts={"repo": chart["repository"]},
            namespace=NETWORK_OPERATOR_NAMESPACE,
            values=network_operator_values(spec),
            # Its operands start only once InfiniBand nodes join; do not hold `up` for them.
            skip_await=True,
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[namespace]))
        # The NicClusterPolicy CRD comes with the chart.
        policy = nic_cluster_policy(spec)
        k8s.apiextensions.CustomResource(
            f"{name}-nic-cluster-policy", api_version=policy["apiVersion"], kind=policy["kind"],
            metadata=policy["metadata"], spec=policy["spec"],
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[self.network_operator]))
        for team in spec.access.teams:
            waits = [args.namespaces[team.name]] if team.name in args.namespaces else []
            for config_map in nccl_config_maps(spec, team):
                k8s.core.v1.ConfigMap(
                    f"{name}-{team.name}-{config_map['metadata']['name']}", metadata=config_map["metadata"],
                    data=config_map["data"],
                    opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=waits))
        self.register_outputs({"infinibandPools": sorted({target.name for target in fabric_targets(spec)})})
