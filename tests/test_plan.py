"""Features asserted on the recorded plan: what each resource receives, its parent, its
dependencies and its options, exactly as `pulumi up` would register them."""

from __future__ import annotations

import gc
import json
import os

import pytest

from aksgpu.plan.planner import SECRET_TEXT, UNKNOWN_TEXT, Plan, _to_plan_value
from aksgpu.plan.report import plan_document
from aksgpu.components.node_pools import REPLACE_ON_CHANGES
from aksgpu.spec import SpecError, parse_cluster_spec
from tests.helpers import EXAMPLE, REPO, SUBSCRIPTION, base_spec, edit, plan_spec, shared_plan

CLUSTER = "azure-native:containerservice:ManagedCluster"
POOL = "azure-native:containerservice:AgentPool"
ROLE = "azure-native:authorization:RoleAssignment"
SUBNET = "azure-native:network:Subnet"


def _pools(plan: Plan) -> dict[str, dict]:
    return {r.inputs["agentPoolName"]: r for r in plan.by_type(POOL)}


def _role(plan: Plan, role_guid: str) -> list:
    return [r for r in plan.by_type(ROLE) if r.inputs["roleDefinitionId"].endswith(role_guid)]


def test_only_the_system_pool_is_inline_and_its_list_is_ignored(example_plans: dict[str, Plan]) -> None:
    cluster = example_plans["prod"].by_type(CLUSTER)[0]
    profiles = cluster.inputs["agentPoolProfiles"]
    assert [p["name"] for p in profiles] == ["system"]
    system = profiles[0]
    assert system["mode"] == "System"
    assert system["nodeTaints"] == ["CriticalAddonsOnly=true:NoSchedule"]
    assert system["osDiskType"] == "Ephemeral" and system["vmSize"] == "Standard_D8ds_v5"
    assert system["kubeletDiskType"] == "Temporary"
    assert system["availabilityZones"] == ["1", "2", "3"]
    assert cluster.options["ignoreChanges"] == ["agentPoolProfiles"]


def test_user_pools_are_agent_pools_replaced_on_immutable_changes(example_plans: dict[str, Plan]) -> None:
    pools = _pools(example_plans["prod"])
    assert "system" not in pools
    for pool in pools.values():
        assert pool.inputs["mode"] == "User"
        assert set(pool.options["replaceOnChanges"]) == set(REPLACE_ON_CHANGES)
        assert {"vmSize", "availabilityZones", "gpuInstanceProfile", "maxPods", "scaleSetPriority"} <= set(
            pool.options["replaceOnChanges"])
        assert pool.options["deleteBeforeReplace"] is True
        # The autoscaler owns the count of autoscaled pools.
        assert pool.options["ignoreChanges"] == (["count"] if pool.inputs["enableAutoScaling"] else [])


def test_pools_are_created_after_the_cluster_one_after_another(example_plans: dict[str, Plan]) -> None:
    plan = example_plans["prod"]
    cluster = plan.by_type(CLUSTER)[0]
    maintenance = plan.by_type("azure-native:containerservice:MaintenanceConfiguration")
    pools = plan.by_type(POOL)
    chain_heads = [p for p in pools if not any(d in {q.urn for q in pools} for d in p.dependencies)]
    assert len(chain_heads) == 1, "chained: exactly one pool starts the chain"
    head = chain_heads[0]
    # The chain starts after the last cluster-level operation (the maintenance windows, chained too).
    assert {m.urn for m in maintenance} & set(head.dependencies)
    for pool in pools:
        assert pool.inputs["resourceName"] == "gpu-prod"
        if pool is not head:
            assert len([d for d in pool.dependencies if d in {q.urn for q in pools}]) == 1
    assert all(cluster.urn in m.dependencies or any(x.urn in m.dependencies for x in maintenance) for m in maintenance)


def test_per_subnet_order_lets_pools_on_different_subnets_start_together() -> None:
    spec = base_spec()
    spec["network"] = {"vnet": {"mode": "create", "addressSpace": ["10.224.0.0/12"], "subnets": [
        {"name": "nodes", "cidr": "10.224.0.0/16"}, {"name": "gpu", "cidr": "10.225.0.0/16"}]}}
    spec["nodePoolOrder"] = "perSubnet"
    spec["nodePools"] = [
        {"name": "cpu", "vmSize": "Standard_D8ds_v5", "count": 1},
        {"name": "cpu2", "vmSize": "Standard_D8ds_v5", "count": 1},
        {"name": "gpu", "kind": "gpu", "vmSize": "Standard_NC24ads_A100_v4", "count": 1, "subnet": "gpu"},
    ]
    plan = plan_spec(spec)
    pools = _pools(plan)
    pool_urns = {p.urn for p in pools.values()}
    assert not pool_urns & set(pools["gpu"].dependencies), "the gpu subnet's pool waits for no other pool"
    assert not pool_urns & set(pools["cpu"].dependencies)
    assert pools["cpu"].urn in pools["cpu2"].dependencies, "pools on one subnet are chained"
    subnet_ids = {s.inputs["subnetName"]: s for s in plan.by_type(SUBNET)}
    assert subnet_ids["gpu"].urn in pools["gpu"].dependencies


def test_gpu_spot_team_and_per_zone_pools(example_plans: dict[str, Plan]) -> None:
    pools = _pools(example_plans["prod"])
    assert {"a1001", "a1002", "a1003", "a100spot1", "a100spot2", "a100spot3"} <= set(pools)
    for zone in "123":
        assert pools[f"a100{zone}"].inputs["availabilityZones"] == [zone]
    spot = pools["a100spot2"].inputs
    assert spot["scaleSetPriority"] == "Spot" and spot["scaleSetEvictionPolicy"] == "Delete"
    assert spot["spotMaxPrice"] == -1
    for pool in pools.values():
        # The taint AKS puts on spot nodes is declared, once, so an update never asks to remove it.
        spot_taints = [t for t in pool.inputs.get("nodeTaints",
                                                  []) if t.startswith("kubernetes.azure.com/scalesetpriority")]
        expected = (["kubernetes.azure.com/scalesetpriority=spot:NoSchedule"] if "scaleSetPriority" in pool.inputs
                    else [])
        assert spot_taints == expected
    gpu = pools["a1001"].inputs
    assert "nvidia.com/gpu=present:NoSchedule" in gpu["nodeTaints"]
    assert gpu["gpuProfile"] == {"driver": "Install"}
    h100 = pools["h100"].inputs
    assert h100["gpuProfile"] == {"driver": "None"}
    assert "aksgpu.io/team=research:NoSchedule" in h100["nodeTaints"]
    assert h100["nodeLabels"]["aksgpu.io/team"] == "research"
    assert "nodeTaints" not in pools["cpu"].inputs


def test_mig_profile_reaches_the_pool() -> None:
    plan = plan_spec(edit(base_spec(), "nodePools.0.gpu", {"migProfile": "MIG3g"}))
    assert _pools(plan)["a100"].inputs["gpuInstanceProfile"] == "MIG3g"


def test_protect_flag_guards_cluster_registry_workspace_and_group(example_plans: dict[str, Plan]) -> None:
    prod = example_plans["prod"]
    protected = {r.type for r in prod.resources if r.options["protect"]}
    # The KMS vault and keys too: deleting either makes the cluster's secrets unreadable; and the
    # disk encryption set, without which the nodes' disks cannot be read.
    assert protected == {CLUSTER, "azure-native:containerregistry:Registry",
                         "azure-native:operationalinsights:Workspace", "azure-native:monitor:AzureMonitorWorkspace",
                         "azure-native:resources:ResourceGroup", "azure-native:keyvault:Vault",
                         "azure-native:keyvault:Key", "azure-native:compute:DiskEncryptionSet"}
    assert not any(r.options["protect"] for r in example_plans["dev"].resources)


def test_identities_and_role_assignments(example_plans: dict[str, Plan]) -> None:
    plan = example_plans["prod"]
    cluster = plan.by_type(CLUSTER)[0]
    identity = cluster.inputs["identity"]
    assert identity["type"] == "UserAssigned" and identity["userAssignedIdentities"] == [UNKNOWN_TEXT]
    assert set(cluster.inputs["identityProfile"]["kubeletidentity"]) == {"resourceId", "clientId", "objectId"}
    acr_pull = _role(plan, "7f951dda-4ed3-4680-a7ca-43fe172d538d")
    assert len(acr_pull) == 1 and acr_pull[0].inputs["principalType"] == "ServicePrincipal"
    kubelet = plan.get("azure-native:managedidentity:UserAssignedIdentity", "gpu-prod-cluster-kubelet")
    assert kubelet.urn in acr_pull[0].dependencies
    operator = _role(plan, "f1a07417-d97a-45cb-824c-7a7467783830")
    network = _role(plan, "4d97b98b-1d4f-4787-a291-c67834d212e7")
    assert len(operator) == 1 and len(network) == 3, "Network Contributor on each created subnet"
    assert {r.urn for r in operator + network} <= set(cluster.dependencies), "the cluster waits for its grants"
    users = _role(plan, "4abbcc35-e782-43d8-92c5-2d3f1bd2253f")
    assert sorted(r.inputs["principalId"] for r in users) == ["11111111-1111-1111-1111-111111111111",
                                                             "22222222-2222-2222-2222-222222222222",
                                                             "33333333-3333-3333-3333-333333333333"]
    reader = _role(plan, "7f6c6a51-bcf8-42ba-9220-52d62157d7db")
    assert [r.inputs["principalId"] for r in reader] == ["33333333-3333-3333-3333-333333333333"]
    assert reader[0].inputs["scope"] == UNKNOWN_TEXT, "the cluster's ID, at cluster scope"
    writer = _role(plan, "a7ffa36f-339b-4b5c-8bdf-e2c188b2c0eb")
    assert writer[0].inputs["principalType"] == "Group"


def test_access_profile(example_plans: dict[str, Plan]) -> None:
    prod = example_plans["prod"].by_type(CLUSTER)[0].inputs
    assert prod["aadProfile"] == {"managed": True, "enableAzureRBAC": True,
                                  "adminGroupObjectIDs": ["11111111-1111-1111-1111-111111111111"]}
    assert prod["disableLocalAccounts"] is True and prod["enableRBAC"] is True
    assert prod["oidcIssuerProfile"] == {"enabled": True}
    assert {k: v for k, v in prod["securityProfile"].items() if k != "azureKeyVaultKms"} == {
        "workloadIdentity": {"enabled": True}, "imageCleaner": {"enabled": True, "intervalHours": 168},
        "defender": {"logAnalyticsWorkspaceResourceId": UNKNOWN_TEXT, "securityMonitoring": {"enabled": True}}}


def test_network_vnet_integration_and_nat_gateway(example_plans: dict[str, Plan]) -> None:
    plan = example_plans["prod"]
    cluster = plan.by_type(CLUSTER)[0].inputs
    assert cluster["networkProfile"] == {
        "networkPlugin": "azure", "networkPluginMode": "overlay", "networkDataplane": "cilium",
        "networkPolicy": "cilium", "podCidr": "10.244.0.0/14", "serviceCidr": "10.0.0.0/16",
        "dnsServiceIP": "10.0.0.10", "outboundType": "userAssignedNATGateway", "loadBalancerSku": "standard"}
    assert cluster["apiServerAccessProfile"] == {"enablePrivateCluster": True, "privateDNSZone": "system",
                                                 "enableVnetIntegration": True, "subnetId": UNKNOWN_TEXT,
                                                 "disableRunCommand": True}
    subnets = {s.inputs["subnetName"]: s for s in plan.by_type(SUBNET)}
    assert subnets["apiserver"].inputs["delegations"] == [
        {"name": "aks-apiserver", "serviceName": "Microsoft.ContainerService/managedClusters"}]
    assert "natGateway" in subnets["nodes"].inputs and "natGateway" in subnets["gpu"].inputs
    assert "natGateway" not in subnets["apiserver"].inputs
    # In the merged spec's order: the preset's subnets (nodes, apiserver), then the environment's.
    ordered = [subnets[n] for n in ("nodes", "apiserver", "gpu")]
    for earlier, later in zip(ordered, ordered[1:], strict=False):
        assert earlier.urn in later.dependencies, "subnets of one VNet are written one at a time"
    assert len(plan.by_type("azure-native:network:PublicIPAddress")) == 2
    pools = _pools(plan)
    assert pools["cpu"].inputs["vnetSubnetID"] == UNKNOWN_TEXT


def test_managed_nat_and_load_balancer_outbound() -> None:
    nat = plan_spec(edit(edit(base_spec(), "network.outbound", "managedNATGateway"), "network.outboundIps", 2))
    profile = nat.by_type(CLUSTER)[0].inputs["networkProfile"]
    assert profile["natGatewayProfile"] == {"managedOutboundIPProfile": {"count": 2}, "idleTimeoutInMinutes": 4}
    assert not nat.by_type("azure-native:network:NatGateway"), "AKS creates a managed NAT gateway itself"
    lb = shared_plan(base_spec()).by_type(CLUSTER)[0].inputs["networkProfile"]
    assert lb["loadBalancerProfile"] == {"managedOutboundIPs": {"count": 1}}


def test_monitoring(example_plans: dict[str, Plan]) -> None:
    plan = example_plans["prod"]
    cluster = plan.by_type(CLUSTER)[0]
    oms = cluster.inputs["addonProfiles"]["omsagent"]
    assert oms == {"enabled": True, "config": {"logAnalyticsWorkspaceResourceID": UNKNOWN_TEXT, "useAADAuth": "true"}}
    assert cluster.inputs["azureMonitorProfile"]["metrics"]["enabled"] is True
    [diag] = [d.inputs for d in plan.by_type("azure-native:monitor:DiagnosticSetting")
              if d.inputs["name"] == "aksgpu-control-plane"]
    assert {log["category"] for log in diag["logs"]} >= {"kube-audit-admin", "cluster-autoscaler", "kube-apiserver"}
    rules = {r.inputs["dataCollectionRuleName"]: r for r in plan.by_type("azure-native:monitor:DataCollectionRule")}
    assert set(rules) == {"MSCI-eastus2-gpu-prod", "MSProm-eastus2-gpu-prod"}
    links = plan.by_type("azure-native:monitor:DataCollectionRuleAssociation")
    assert all(cluster.urn in link.dependencies for link in links)
    workspace = plan.by_type("azure-native:operationalinsights:Workspace")[0].inputs
    assert workspace["retentionInDays"] == 90
    assert workspace["workspaceName"] == "gpu-prod-logs"


def test_monitoring_can_be_turned_off() -> None:
    spec = edit(base_spec(), "monitoring", {"logAnalytics": {"mode": "none"}, "containerInsights": False,
                                            "controlPlaneLogs": []})
    spec = edit(spec, "security", {"defender": False})  # Defender reports to the workspace
    plan = plan_spec(spec)
    assert not [r for r in plan.resources if r.type.startswith("azure-native:monitor:")]
    cluster = plan.by_type(CLUSTER)[0].inputs
    assert "omsagent" not in cluster["addonProfiles"] and "defender" not in cluster["securityProfile"]


def test_existing_resource_group_registry_and_subnets_are_not_created() -> None:
    subnet = f"{SUBSCRIPTION}/resourceGroups/net/providers/Microsoft.Network/virtualNetworks/vnet-hub/subnets/nodes"
    spec = base_spec()
    spec["resourceGroup"]["create"] = False
    spec["registry"] = {"mode": "existing",
                        "id": f"{SUBSCRIPTION}/resourceGroups/r/providers/Microsoft.ContainerRegistry/"
                              "registries/Shared"}
    spec["network"] = {"vnet": {"mode": "existing", "subnets": [{"name": "nodes", "id": subnet}]}}
    plan = plan_spec(spec)
    types = {r.type for r in plan.resources}
    assert not types & {"azure-native:resources:ResourceGroup", "azure-native:containerregistry:Registry",
                        "azure-native:network:VirtualNetwork", SUBNET}
    assert _pools(plan)["a100"].inputs["vnetSubnetID"] == subnet
    assert plan.outputs["registryLoginServer"] == "shared.azurecr.io"
    acr_pull = _role(plan, "7f951dda-4ed3-4680-a7ca-43fe172d538d")[0]
    assert acr_pull.inputs["scope"].endswith("/registries/Shared")


def test_maintenance_windows(example_plans: dict[str, Plan]) -> None:
    windows = {m.inputs["configName"]: m.inputs for m in
               example_plans["prod"].by_type("azure-native:containerservice:MaintenanceConfiguration")}
    assert set(windows) == {"aksManagedAutoUpgradeSchedule", "aksManagedNodeOSUpgradeSchedule"}
    assert windows["aksManagedNodeOSUpgradeSchedule"]["maintenanceWindow"] == {
        "schedule": {"weekly": {"dayOfWeek": "Saturday", "intervalWeeks": 1}},
        "durationHours": 6, "startTime": "02:00", "utcOffset": "+00:00"}


def test_outputs_and_secret_kubeconfig(example_plans: dict[str, Plan]) -> None:
    outputs = example_plans["dev"].outputs
    assert set(outputs) == {"clusterName", "clusterId", "oidcIssuerUrl", "registryLoginServer",
                            "logAnalyticsWorkspaceId", "kubeconfig"}
    assert outputs["kubeconfig"] == SECRET_TEXT
    assert outputs["clusterName"] == "gpu-dev"
    assert outputs["clusterId"] == UNKNOWN_TEXT


def test_components_parent_their_resources(example_plans: dict[str, Plan]) -> None:
    plan = example_plans["prod"]
    by_urn = {r.urn: r for r in plan.resources}
    parents = {r.type: by_urn[r.parent].type for r in plan.resources if r.parent in by_urn}
    assert parents[POOL] == "aksgpu:index:NodePools"
    assert parents[CLUSTER] == "aksgpu:index:Cluster"
    assert parents["azure-native:network:VirtualNetwork"] == "aksgpu:index:Network"
    assert parents["azure-native:containerregistry:Registry"] == "aksgpu:index:Registry"
    assert parents["aksgpu:index:Cluster"] == "aksgpu:index:AksGpuCluster"
    assert all(r.parent in by_urn for r in plan.resources if r.type != "aksgpu:index:AksGpuCluster")


def test_plan_is_deterministic() -> None:
    spec = base_spec()
    warnings = parse_cluster_spec(spec)[1]
    first = json.dumps(plan_document(plan_spec(spec), warnings), sort_keys=True)
    second = json.dumps(plan_document(plan_spec(spec), warnings), sort_keys=True)
    assert first == second


def test_planning_restores_the_garbage_collector_as_it_found_it() -> None:
    spec = base_spec()
    for enabled in (True, False):
        gc.enable() if enabled else gc.disable()
        plan_spec(spec)
        assert gc.isenabled() is enabled
    gc.enable()


def test_plans_in_one_process_collect_once_their_frozen_leftovers_pass_the_limit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from aksgpu.plan import planner

    monkeypatch.setattr(planner, "_FROZEN_LEFTOVER_LIMIT", 1_000)
    monkeypatch.setattr(planner, "_frozen_since_collected", None)
    monkeypatch.setattr(gc, "get_freeze_count", lambda: 0)  # the test process's own size: no higher limit
    collected: list[int] = []
    real_collect = gc.collect
    monkeypatch.setattr(gc, "collect", lambda *args: collected.append(1) or real_collect(*args))
    kept = []
    for made, collected_after in ((5_000, 0), (600, 0), (600, 0), (0, 1), (10, 1)):
        gc.disable()  # as plan_stack does while the program runs
        kept.append([[i] for i in range(made)])
        planner._resume_collector()
        assert gc.isenabled()
        assert len(collected) == collected_after, (made, collected)  # the first plan's 5,000 are the base


def test_a_larger_process_collects_its_frozen_leftovers_less_often(monkeypatch: pytest.MonkeyPatch) -> None:
    from aksgpu.plan import planner

    monkeypatch.setattr(planner, "_FROZEN_LEFTOVER_LIMIT", 1_000)
    monkeypatch.setattr(planner, "_frozen_since_collected", None)
    monkeypatch.setattr(gc, "get_freeze_count", lambda: 3_000)  # frozen when it last collected
    collected: list[int] = []
    real_collect = gc.collect
    monkeypatch.setattr(gc, "collect", lambda *args: collected.append(1) or real_collect(*args))
    kept = []
    for made, collected_after in ((5_000, 0), (2_000, 0), (2_000, 0), (0, 1)):
        gc.disable()
        kept.append([[i] for i in range(made)])
        planner._resume_collector()
        assert len(collected) == collected_after, (made, collected)  # 2,000 and 4,000 against 3,000


def test_plan_values_read_the_same_whatever_order_the_engine_hands_keys_over() -> None:
    # The engine's protobuf Structs carry no key order; the plan (and --manifests) must not vary.
    first = {"spec": {"b": 1.0, "a": [{"z": "x", "y": 2.0}]}, "metadata": {"name": "n", "labels": {"q": "1", "p": "2"}}}
    second = {"metadata": {"labels": {"p": "2", "q": "1"}, "name": "n"},
              "spec": {"a": [{"y": 2.0, "z": "x"}], "b": 1.0}}
    assert json.dumps(_to_plan_value(first)) == json.dumps(_to_plan_value(second))
    assert list(_to_plan_value(first)["spec"]["a"][0]) == ["y", "z"]


@pytest.mark.slow
def test_plan_json_is_byte_identical_across_processes() -> None:
    # Key order inside the engine's Structs and Python's set order vary with the hash seed; the
    # plan document must not, so that plans can be diffed and cached.
    import subprocess
    import sys

    outputs = []
    for seed in ("1", "2"):
        result = subprocess.run([sys.executable, "-c", "from aksgpu.cli.app import main; main()",
                                 "plan", "dev", "--json"],
                                cwd=EXAMPLE, capture_output=True, env={**os.environ, "PYTHONHASHSEED": seed},
                                timeout=300, check=False)
        assert result.returncode == 0, result.stderr.decode()
        outputs.append(result.stdout)
    assert outputs[0] == outputs[1]
    assert b'"inputs"' in outputs[0]


def test_ctrl_c_while_the_program_runs_ends_the_plan_with_one_line_and_130() -> None:
    # Pulumi's runtime can swallow a KeyboardInterrupt or hang on it; the plan stops the process instead.
    import subprocess
    import sys

    code = ("import os, signal, time\n"
            "from aksgpu.plan.planner import _interrupt_ends_the_process\n"
            "with _interrupt_ends_the_process():\n"
            "    os.kill(os.getpid(), signal.SIGINT)\n"
            "    time.sleep(5)\n"
            "print('not reached')\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 130 and result.stdout == ""
    assert result.stderr == "interrupted: the offline plan stopped; nothing was written.\n"


@pytest.mark.slow
def test_a_stack_without_helm_releases_does_not_load_helm_support() -> None:
    """Pulumi evaluates a component's annotations when it registers it; an annotation naming
    k8s.helm.v3 loaded Helm's Chart support (PyYAML, requests), 0.15 s of every plan and preview."""
    import subprocess
    import sys

    code = ("import sys; from aksgpu.project.stackfile import resolve_stack; "
            "from aksgpu.plan.planner import plan_stack; "
            "plan = plan_stack(resolve_stack('stacks/Pulumi.dev.yaml')); "
            "print(sorted({r.type for r in plan.resources if 'helm' in r.type}), "
            "'pulumi_kubernetes.helm.v3.helm' in sys.modules, 'requests' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], cwd=EXAMPLE, capture_output=True, text=True, check=True)
    assert result.stdout.split("\n")[-2] == "[] False False"


def test_every_created_subnet_has_an_nsg_and_node_subnets_let_in_what_inbound_lists() -> None:
    spec = edit(base_spec(), "network.vnet", {
        "mode": "create", "addressSpace": ["10.224.0.0/12"],
        "subnets": [{"name": "nodes", "cidr": "10.224.0.0/16"}, {"name": "apiserver", "cidr": "10.225.0.0/28"}],
        "inbound": [{"name": "frontdoor", "ports": [443], "sources": ["AzureFrontDoor.Backend"]},
                    {"name": "office", "ports": ["443", "8000-8100"], "sources": ["203.0.113.0/24", "2001:db8::/48"]}]})
    private = edit(spec, "controlPlane.apiServer",
                   {"access": "private", "vnetIntegration": True, "subnet": "apiserver"})
    plan = plan_spec(private)
    groups = {g.inputs["networkSecurityGroupName"]: g.inputs for g in
              plan.by_type("azure-native:network:NetworkSecurityGroup")}
    assert set(groups) == {"gpu-test-nodes-nsg", "gpu-test-apiserver-nsg"}
    common = {"direction": "Inbound", "access": "Allow", "protocol": "Tcp", "sourcePortRange": "*",
              "destinationAddressPrefix": "*"}
    # A service tag is a rule's one source (Azure takes tags only in sourceAddressPrefix).
    assert groups["gpu-test-nodes-nsg"]["securityRules"] == [
        {"name": "frontdoor", "priority": 1000, **common, "sourceAddressPrefix": "AzureFrontDoor.Backend",
         "destinationPortRange": "443"},
        {"name": "office", "priority": 1010, **common, "sourceAddressPrefixes": ["203.0.113.0/24", "2001:db8::/48"],
         "destinationPortRanges": ["443", "8000-8100"]}]
    assert "securityRules" not in groups["gpu-test-apiserver-nsg"], "the API server subnet takes no inbound rules"
    assert all(s.inputs["networkSecurityGroup"] == {"id": UNKNOWN_TEXT} for s in plan.by_type(SUBNET))
    # A public API server's endpoint takes traffic from outside the VNet: its subnet gets no NSG.
    public = edit(spec, "controlPlane.apiServer", {"access": "public", "vnetIntegration": True, "subnet": "apiserver",
                                                   "authorizedIpRanges": ["20.30.40.0/24"]})
    subnets = {s.inputs["subnetName"]: s.inputs for s in plan_spec(public).by_type(SUBNET)}
    assert "networkSecurityGroup" not in subnets["apiserver"] and "networkSecurityGroup" in subnets["nodes"]


@pytest.mark.parametrize(("rule", "path"), [
    ({"name": "web", "ports": ["0"], "sources": ["Internet"]}, "network.vnet.inbound[0].ports[0]"),
    ({"name": "web", "ports": ["90-80"], "sources": ["Internet"]}, "network.vnet.inbound[0].ports[0]"),
    ({"name": "web", "ports": ["443"], "sources": ["10.0.0.0/33"]}, "network.vnet.inbound[0].sources[0]"),
    ({"name": "web", "ports": ["443"], "sources": ["not a tag!"]}, "network.vnet.inbound[0].sources[0]"),
    ({"name": "web", "ports": ["443"], "sources": ["Internet", "10.0.0.0/8"]}, "network.vnet.inbound[0].sources"),
])
def test_bad_inbound_rules_name_the_field(rule: dict, path: str) -> None:
    spec = edit(base_spec(), "network.vnet", {"mode": "create", "subnets": [{"name": "nodes", "cidr": "10.224.0.0/16"}],
                                              "inbound": [rule]})
    with pytest.raises(SpecError) as error:
        parse_cluster_spec(spec)
    assert [issue.path for issue in error.value.errors] == [path]


def test_kms_creates_a_private_vault_and_key_and_grants_them_before_the_cluster(
        example_plans: dict[str, Plan]) -> None:
    plan = example_plans["prod"]
    [vault] = plan.by_type("azure-native:keyvault:Vault")
    assert vault.inputs["vaultName"] == "gpu-prod-kms"
    assert {k: vault.inputs["properties"][k] for k in ("enablePurgeProtection", "enableRbacAuthorization",
                                                        "publicNetworkAccess", "networkAcls")} == {
        "enablePurgeProtection": True, "enableRbacAuthorization": True, "publicNetworkAccess": "Disabled",
        "networkAcls": {"bypass": "AzureServices", "defaultAction": "Deny"}}
    [key] = [key for key in plan.by_type("azure-native:keyvault:Key") if key.inputs["keyName"] == "aks-kms"]
    assert {k: key.inputs["properties"][k] for k in ("kty", "keySize")} == {"kty": "RSA-HSM", "keySize": 2048}
    assert vault.inputs["properties"]["sku"] == {"family": "A", "name": "premium"}, "HSM keys need Premium"
    cluster = plan.by_type(CLUSTER)[0]
    assert cluster.inputs["securityProfile"]["azureKeyVaultKms"] == {
        "enabled": True, "keyId": UNKNOWN_TEXT, "keyVaultNetworkAccess": "Private", "keyVaultResourceId": UNKNOWN_TEXT}
    grants = {r.urn: r for r in plan.by_type(ROLE) if "-kms-" in r.name}
    role_ids = sorted(r.inputs["roleDefinitionId"].rsplit("/", 1)[-1] for r in grants.values())
    assert role_ids == sorted(["12338af0-0e69-4776-bea7-57ae8d297424", "f25e0fa2-a7c8-4377-a976-54943a77a395"])
    assert set(grants) <= set(cluster.dependencies), "AKS checks the identity's access when KMS is turned on"


def test_kms_with_an_existing_key_uses_it_and_grants_only_what_a_public_vault_needs() -> None:
    vault = f"{SUBSCRIPTION}/resourceGroups/sec/providers/Microsoft.KeyVault/vaults/corp-kms"
    key = "https://corp-kms.vault.azure.net/keys/aks/0123456789abcdef0123456789abcdef"
    spec = edit(base_spec(), "security.kms", {"mode": "existing", "networkAccess": "Public",
                                              "keyVaultId": vault, "keyId": key})
    plan = plan_spec(spec)
    assert not plan.by_type("azure-native:keyvault:Vault") and not plan.by_type("azure-native:keyvault:Key")
    assert plan.by_type(CLUSTER)[0].inputs["securityProfile"]["azureKeyVaultKms"] == {
        "enabled": True, "keyId": key, "keyVaultNetworkAccess": "Public"}
    [grant] = [r for r in plan.by_type(ROLE) if "-kms-" in r.name]
    assert grant.inputs["scope"] == vault and grant.inputs["roleDefinitionId"].endswith(
        "12338af0-0e69-4776-bea7-57ae8d297424")


@pytest.mark.parametrize(("kms", "path"), [
    ({"mode": "create"}, "security.kms.networkAccess"),  # private without API server VNet integration
    ({"mode": "existing", "networkAccess": "Public", "keyVaultId": f"{SUBSCRIPTION}/resourceGroups/r/providers/"
      "Microsoft.KeyVault/vaults/corp-kms", "keyId": "https://corp-kms.vault.azure.net/keys/aks"},
     "security.kms.keyId"),  # no version
    ({"mode": "existing", "networkAccess": "Public", "keyVaultId": f"{SUBSCRIPTION}/resourceGroups/r/providers/"
      "Microsoft.KeyVault/vaults/corp-kms", "keyId": "https://other.vault.azure.net/keys/aks/"
      "0123456789abcdef0123456789abcdef"}, "security.kms.keyId"),  # another vault's key
    ({"mode": "create", "networkAccess": "Public", "keyVaultName": "bad--name"}, "security.kms.keyVaultName"),
    ({"mode": "none", "keyId": "https://corp-kms.vault.azure.net/keys/aks/0123456789abcdef0123456789abcdef"},
     "security.kms.keyId"),
    ({"mode": "existing", "networkAccess": "Public", "hsm": False, "keyVaultId": f"{SUBSCRIPTION}/resourceGroups/r/"
      "providers/Microsoft.KeyVault/vaults/corp-kms", "keyId": "https://corp-kms.vault.azure.net/keys/aks/"
      "0123456789abcdef0123456789abcdef"}, "security.kms.hsm"),  # a setting of the vault aksgpu creates
])
def test_bad_kms_settings_name_the_field(kms: dict, path: str) -> None:
    with pytest.raises(SpecError) as error:
        parse_cluster_spec(edit(base_spec(), "security.kms", kms))
    assert [issue.path for issue in error.value.errors] == [path]


def test_disk_encryption_creates_a_set_with_its_own_key_and_grants_both_before_the_cluster(
        example_plans: dict[str, Plan]) -> None:
    plan = example_plans["prod"]
    [vault] = plan.by_type("azure-native:keyvault:Vault")
    keys = {key.inputs["keyName"]: key for key in plan.by_type("azure-native:keyvault:Key")}
    assert set(keys) == {"aks-kms", "aks-disks"}
    disk_key = keys["aks-disks"].inputs["properties"]
    assert {k: disk_key[k] for k in ("kty", "keySize")} == {"kty": "RSA-HSM", "keySize": 2048}
    assert vault.urn in keys["aks-disks"].dependencies
    [encryption_set] = plan.by_type("azure-native:compute:DiskEncryptionSet")
    assert {k: encryption_set.inputs[k] for k in ("diskEncryptionSetName", "encryptionType", "identity",
                                                    "rotationToLatestKeyVersionEnabled", "location")} == {
        "diskEncryptionSetName": "gpu-prod-disks", "encryptionType": "EncryptionAtRestWithCustomerKey",
        "identity": {"type": "SystemAssigned"}, "rotationToLatestKeyVersionEnabled": True, "location": "eastus2"}
    assert keys["aks-disks"].urn in encryption_set.dependencies and vault.urn in encryption_set.dependencies
    cluster = plan.by_type(CLUSTER)[0]
    assert cluster.inputs["diskEncryptionSetID"] == UNKNOWN_TEXT and encryption_set.urn in cluster.dependencies
    grants = {r.name: r for r in plan.by_type(ROLE) if "-disks-" in r.name}
    roles = {name: r.inputs["roleDefinitionId"].rsplit("/", 1)[-1] for name, r in grants.items()}
    assert sorted(roles.values()) == sorted(["e147488a-f6f5-4113-8e2d-b22465e65bf6",  # the set, on its key
                                             "acdd72a7-3385-48ef-bd42-f606fba81ae7"])  # the control plane, on the set
    assert {r.urn for r in grants.values()} <= set(cluster.dependencies), "AKS uses the set as it creates the nodes"


def test_an_existing_disk_encryption_set_is_passed_and_read_by_the_control_plane() -> None:
    encryption_set = f"{SUBSCRIPTION}/resourceGroups/sec/providers/Microsoft.Compute/diskEncryptionSets/corp_disks-1"
    plan = plan_spec(edit(base_spec(), "security.diskEncryption", {"mode": "existing",
                                                                   "diskEncryptionSetId": encryption_set}))
    assert not plan.by_type("azure-native:compute:DiskEncryptionSet")
    assert plan.by_type(CLUSTER)[0].inputs["diskEncryptionSetID"] == encryption_set
    [grant] = [r for r in plan.by_type(ROLE) if "-disks-" in r.name]
    assert grant.inputs["scope"] == encryption_set and grant.inputs["roleDefinitionId"].endswith(
        "acdd72a7-3385-48ef-bd42-f606fba81ae7")
    assert "diskEncryptionSetID" not in shared_plan(base_spec()).by_type(CLUSTER)[0].inputs


def test_software_keys_in_a_standard_vault_when_hsm_is_off() -> None:
    spec = edit(base_spec(), "security.kms", {"mode": "create", "networkAccess": "Public", "hsm": False})
    plan = plan_spec(edit(spec, "security.diskEncryption", {"mode": "create"}))
    [vault] = plan.by_type("azure-native:keyvault:Vault")
    assert vault.inputs["properties"]["sku"]["name"] == "standard"
    assert {key.inputs["properties"]["kty"] for key in plan.by_type("azure-native:keyvault:Key")} == {"RSA"}


@pytest.mark.parametrize(("disks", "path"), [
    ({"mode": "create"}, "security.diskEncryption.mode"),  # the base spec has no KMS vault for the key
    ({"mode": "existing"}, "security.diskEncryption.diskEncryptionSetId"),
    ({"mode": "existing", "diskEncryptionSetId": f"{SUBSCRIPTION}/resourceGroups/r/providers/Microsoft.KeyVault/"
      "vaults/corp-kms"}, "security.diskEncryption.diskEncryptionSetId"),  # not a disk encryption set
    ({"mode": "existing", "diskEncryptionSetId": f"{SUBSCRIPTION}/resourceGroups/r/providers/Microsoft.Compute/"
      "diskEncryptionSets/bad.name"}, "security.diskEncryption.diskEncryptionSetId"),
    ({"mode": "none", "diskEncryptionSetId": f"{SUBSCRIPTION}/resourceGroups/r/providers/Microsoft.Compute/"
      "diskEncryptionSets/corp"}, "security.diskEncryption.diskEncryptionSetId"),
])
def test_bad_disk_encryption_settings_name_the_field(disks: dict, path: str) -> None:
    with pytest.raises(SpecError) as error:
        parse_cluster_spec(edit(base_spec(), "security.diskEncryption", disks))
    assert [issue.path for issue in error.value.errors] == [path]
    assert all(issue.fix for issue in error.value.errors)


def test_a_port_that_is_neither_number_nor_text_gets_one_message() -> None:
    spec = edit(base_spec(), "network.vnet", {"mode": "create", "subnets": [{"name": "nodes", "cidr": "10.224.0.0/16"}],
                                              "inbound": [{"name": "web", "ports": [True], "sources": ["Internet"]}]})
    with pytest.raises(SpecError) as error:
        parse_cluster_spec(spec)
    assert [(issue.path, issue.value) for issue in error.value.errors] == [("network.vnet.inbound[0].ports[0]", True)]
