"""A second `pulumi up` with no change must plan no change.

pulumi-azure-native diffs the program's inputs against the inputs stored at the last update
(provider/pkg/provider/provider.go, Diff), so a deterministic program plans no change on its own
(test_plan.py: plan --json is byte-identical across processes). What still changes a second
plan is Azure moving under a stored input: a refresh copies into the stored inputs what changed
after the last write (pulumi-azure-native PR #280), and the next `up` then tries to undo it. Each
test below is one thing AKS is documented to add or change on its own, checked on the plans of
the examples and of a spec that uses every feature involved:

- spot pools: AKS taints spot nodes kubernetes.azure.com/scalesetpriority=spot:NoSchedule
  (azure-aks-docs spot-node-pool.md); an update without it is refused ("Changing property
  'properties.nodeTaints' is not allowed", pulumi-azure-native#959), and AKS rejects upgrade
  settings on spot pools ("Spot pools can't set max surge", terraform-provider-azurerm#19355).
- pod and API server subnets: AKS delegates a pod subnet to Microsoft.ContainerService/
  managedClusters when it starts using it (MicrosoftDocs/azure-docs#103167), and requires the
  API server subnet delegated (api-server-vnet-integration.md); a node subnet must not be
  delegated (SubnetIsDelegated).
- the inline system pool: AgentPools created after the cluster show up in its
  agentPoolProfiles; the cluster ignores that list after creation, and AKS refuses pool changes
  through it ("Adding agent pools to an existing cluster is not allowed through managed
  cluster operations", pulumi-azure-native#579).
- autoscaled pools: the cluster autoscaler changes count.
- ephemeral OS disks: a pool created without osDiskSizeGB gets an OS disk as large as the VM's
  temp disk (azure-aks-docs concepts-storage.md, pools created since March 2025), so the size
  is stated; OS disk size cannot change after creation.
- the VNet: subnets are separate resources, never also inline (pulumi-azure-native#611).
- values AKS defaults when the request leaves them out and may change later are stated:
  upgrade channels, network profile, tier, OIDC issuer and workload identity.
"""

from __future__ import annotations

from typing import Any

import pytest

from aksgpu.plan.planner import Plan, plan_stack
from aksgpu.project.stackfile import resolve_stack
from aksgpu.spec import parse_cluster_spec
from tests.helpers import EXAMPLE, base_spec, edit, plan_spec

AGENT_POOL = "azure-native:containerservice:AgentPool"
CLUSTER = "azure-native:containerservice:ManagedCluster"
SUBNET = "azure-native:network:Subnet"
SPOT_TAINT = "kubernetes.azure.com/scalesetpriority=spot:NoSchedule"
AKS_DELEGATION = "Microsoft.ContainerService/managedClusters"


def _pod_subnet_spec() -> dict[str, Any]:
    """Azure CNI with a pod subnet, API server VNet integration, a spot pool and an ephemeral OS disk."""
    spec = edit(base_spec(), "network", {
        "plugin": "azure", "outbound": "userAssignedNATGateway",
        "vnet": {"mode": "create", "addressSpace": ["10.224.0.0/12"], "nodeSubnet": "nodes", "podSubnet": "pods",
                 "subnets": [{"name": "nodes", "cidr": "10.224.0.0/16"}, {"name": "pods", "cidr": "10.225.0.0/16"},
                             {"name": "api", "cidr": "10.226.0.0/28"}]}})
    spec = edit(spec, "controlPlane.apiServer", {"vnetIntegration": True, "subnet": "api",
                                                 "authorizedIpRanges": ["20.30.40.0/24"]})
    spec = edit(spec, "nodePools.1", {"name": "a100spot", "kind": "gpu", "vmSize": "Standard_NC24ads_A100_v4",
                                      "priority": "spot", "minCount": 0, "maxCount": 4})
    spec = edit(spec, "nodePools.2", {"name": "cpu", "vmSize": "Standard_D8ds_v5", "count": 2,
                                      "osDiskType": "Ephemeral"})
    return spec


POD_SUBNET_SPEC = _pod_subnet_spec()


@pytest.fixture(scope="module")
def pod_subnet_plan() -> Plan:
    return plan_spec(POD_SUBNET_SPEC)


def _plans(example_plans: dict[str, Plan], pod_subnet_plan: Plan) -> list[Plan]:
    return [*example_plans.values(), pod_subnet_plan]


def _pool_bodies(plan: Plan) -> list[dict[str, Any]]:
    """Every agent pool body: the separate AgentPools and the cluster's inline system pool."""
    bodies = [pool.inputs for pool in plan.by_type(AGENT_POOL)]
    bodies += plan.by_type(CLUSTER)[0].inputs["agentPoolProfiles"]
    return bodies


def test_spot_pools_declare_the_taint_aks_adds_and_no_upgrade_settings(example_plans: dict[str, Plan],
                                                                        pod_subnet_plan: Plan) -> None:
    spot_pools = [p for plan in _plans(example_plans, pod_subnet_plan) for p in plan.by_type(AGENT_POOL)
                  if p.inputs.get("scaleSetPriority") == "Spot"]
    assert spot_pools, "the examples have spot pools"
    for pool in spot_pools:
        assert pool.inputs["nodeTaints"].count(SPOT_TAINT) == 1, pool.name
        assert "upgradeSettings" not in pool.inputs, pool.name


def test_pod_and_api_server_subnets_carry_the_delegation_aks_adds(pod_subnet_plan: Plan) -> None:
    # Subnet IDs are unknown before apply, so which subnet serves what is read from the specs.
    specs = {"prod": parse_cluster_spec(resolve_stack("prod", cwd=EXAMPLE).cluster)[0],
             "test": parse_cluster_spec(POD_SUBNET_SPEC)[0]}
    plans = {"prod": plan_stack(resolve_stack("prod", cwd=EXAMPLE)), "test": pod_subnet_plan}
    checked = 0
    for key, spec in specs.items():
        vnet = spec.network.vnet
        pods = {pool.pod_subnet or vnet.pod_subnet for _, pool in spec.all_pools} - {None}
        nodes = {pool.subnet or vnet.node_subnet for _, pool in spec.all_pools}
        api = {spec.control_plane.api_server.subnet} - {None}
        assert pods | api, key
        for subnet in plans[key].by_type(SUBNET):
            name = subnet.inputs["subnetName"]
            services = [d["serviceName"] for d in subnet.inputs.get("delegations") or []]
            if name in pods | api:
                assert services == [AKS_DELEGATION], (key, name)
                checked += 1
            if name in nodes:
                assert services == [], (key, name, "a node subnet must not be delegated")
    assert checked == 3, "prod's API server subnet and the test spec's pod and API server subnets"


def test_the_cluster_ignores_its_pool_list_and_autoscaled_pools_their_count(example_plans: dict[str, Plan],
                                                                           pod_subnet_plan: Plan) -> None:
    for plan in _plans(example_plans, pod_subnet_plan):
        assert plan.by_type(CLUSTER)[0].options["ignoreChanges"] == ["agentPoolProfiles"]
        assert len(plan.by_type(CLUSTER)[0].inputs["agentPoolProfiles"]) == 1
        for pool in plan.by_type(AGENT_POOL):
            autoscaled = pool.inputs.get("enableAutoScaling") is True
            assert ("count" in pool.options["ignoreChanges"]) == autoscaled, pool.name


def test_ephemeral_os_disks_and_temp_disk_kubelet_state_the_os_disk_size(example_plans: dict[str, Plan],
                                                                         pod_subnet_plan: Plan) -> None:
    checked = 0
    for plan in _plans(example_plans, pod_subnet_plan):
        for body in _pool_bodies(plan):
            if body.get("osDiskType") == "Ephemeral" or body.get("kubeletDiskType") == "Temporary":
                assert isinstance(body.get("osDiskSizeGB"), int), body.get("name") or body.get("agentPoolName")
                checked += 1
    assert checked >= 3


def test_the_vnet_never_lists_subnets_inline(example_plans: dict[str, Plan], pod_subnet_plan: Plan) -> None:
    for plan in _plans(example_plans, pod_subnet_plan):
        for vnet in plan.by_type("azure-native:network:VirtualNetwork"):
            assert "subnets" not in vnet.inputs and vnet.options["ignoreChanges"] == ["subnets"]


def test_values_aks_would_default_are_stated(example_plans: dict[str, Plan], pod_subnet_plan: Plan) -> None:
    for plan in _plans(example_plans, pod_subnet_plan):
        cluster = plan.by_type(CLUSTER)[0].inputs
        assert set(cluster["autoUpgradeProfile"]) == {"upgradeChannel", "nodeOSUpgradeChannel"}
        assert {"networkPlugin", "serviceCidr", "dnsServiceIP", "outboundType", "loadBalancerSku"} <= set(
            cluster["networkProfile"])
        assert cluster["sku"]["tier"] in ("Free", "Standard", "Premium")
        assert isinstance(cluster["oidcIssuerProfile"]["enabled"], bool)
        assert isinstance(cluster["securityProfile"]["workloadIdentity"]["enabled"], bool)
        assert isinstance(cluster["disableLocalAccounts"], bool) and cluster["enableRBAC"] is True
