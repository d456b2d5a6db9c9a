"""Every ManagedCluster and AgentPool body the example plans would send validates against
Azure's own OpenAPI spec for Microsoft.ContainerService 2025-09-01 (../shared/specs), and so
do their other Azure bodies against the specs in tests/data/azure-rest-api (SOURCE.md)."""

from __future__ import annotations

import copy

import pytest

from aksgpu.plan.planner import Plan
from tests.arm_template import cluster_arm_shape
from tests.helpers import REPO, SHARED, SUBSCRIPTION, base_spec, edit, plan_spec
from tests.oracles.azure_openapi import AksOpenApi

pytestmark = pytest.mark.skipif(not (SHARED / "specs").is_dir(), reason="../shared/specs is not beside the repo")


@pytest.fixture(scope="module")
def azure_spec() -> AksOpenApi:
    return AksOpenApi.load(SHARED)


def _problems(plan: Plan, azure_spec: AksOpenApi) -> dict[str, list[str]]:
    problems = {}
    for cluster in plan.by_type("azure-native:containerservice:ManagedCluster"):
        problems[cluster.name] = azure_spec.validate_managed_cluster(cluster_arm_shape(cluster.inputs))
    for pool in plan.by_type("azure-native:containerservice:AgentPool"):
        problems[pool.name] = azure_spec.validate_agent_pool(pool.inputs)
    return problems


def test_example_plans_validate(example_plans: dict[str, Plan], azure_spec: AksOpenApi) -> None:
    for env, plan in example_plans.items():
        problems = _problems(plan, azure_spec)
        assert len(problems) >= 2, f"{env}: a cluster and at least one pool"
        assert all(not found for found in problems.values()), f"{env}: {problems}"


VARIANTS = {
    "kubenet": [("network.plugin", "kubenet"), ("network.policy", "calico")],
    "azure cni, pod subnet": [("network.plugin", "azure"), ("network.vnet", {
        "mode": "create", "addressSpace": ["10.224.0.0/12"], "podSubnet": "pods",
        "subnets": [{"name": "nodes", "cidr": "10.224.0.0/16"}, {"name": "pods", "cidr": "10.225.0.0/16"}]})],
    "managed nat": [("network.outbound", "managedNATGateway")],
    "private cluster": [("controlPlane.apiServer", {"access": "private", "privateDnsZone": "none"})],
    "mig spot": [("nodePools.0.gpu", {"migProfile": "MIG2g"}), ("nodePools.0.priority", "spot"),
                 ("nodePools.0.spot", {"evictionPolicy": "Deallocate", "maxPrice": 3.5})],
    "reserved capacity, placement group": [
        ("nodePools.0.capacityReservationGroupId",
         f"{SUBSCRIPTION}/resourceGroups/capacity/providers/Microsoft.Compute/capacityReservationGroups/a100"),
        ("nodePools.0.proximityPlacementGroupId",
         f"{SUBSCRIPTION}/resourceGroups/net/providers/Microsoft.Compute/proximityPlacementGroups/ppg1"),
        ("nodePools.0.zones", ["1"])],
    "lts premium": [("controlPlane.tier", "Premium"), ("controlPlane.supportPlan", "AKSLongTermSupport")],
    "no aad": [("access", {"aad": {"enabled": False}, "localAccounts": True})],
    "pool upgrade settings": [("nodePools.0.upgrade", {"maxSurge": "33%", "maxUnavailable": "1",
                                                       "drainTimeoutMinutes": 45, "nodeSoakMinutes": 5})],
}


@pytest.mark.parametrize("edits", list(VARIANTS.values()), ids=list(VARIANTS))
def test_spec_variants_validate(edits: list, azure_spec: AksOpenApi) -> None:
    spec = base_spec()
    for path, value in edits:
        spec = edit(spec, path, value)
    problems = _problems(plan_spec(spec), azure_spec)
    assert all(not found for found in problems.values()), problems


def test_the_check_catches_a_bad_body(example_plans: dict[str, Plan], azure_spec: AksOpenApi) -> None:
    pool = example_plans["dev"].by_type("azure-native:containerservice:AgentPool")[0]
    assert azure_spec.validate_agent_pool({**pool.inputs, "osDiskType": "Local"})


# The other Azure bodies the examples declare, each against the OpenAPI spec of the API version
# pulumi-azure-native 3.29.0 uses for its class (tests/data/azure-rest-api, SOURCE.md): the spec
# file under tests/data/azure-rest-api, its PUT operation, and the inputs that stay at the top of
# the body (the others go under `properties`; path parameters go in the URL).
OTHER_BODIES = {
    "azure-native:network:NetworkSecurityGroup": (
        "network/resource-manager/Microsoft.Network/stable/2024-05-01/networkSecurityGroup.json",
        "NetworkSecurityGroups_CreateOrUpdate", {"id", "location", "tags"}),
    "azure-native:network:Subnet": (
        "network/resource-manager/Microsoft.Network/stable/2024-05-01/virtualNetwork.json",
        "Subnets_CreateOrUpdate", {"id", "name", "type"}),
    "azure-native:network:PrivateEndpoint": (
        "network/resource-manager/Microsoft.Network/stable/2024-05-01/privateEndpoint.json",
        "PrivateEndpoints_CreateOrUpdate", {"id", "location", "tags", "extendedLocation"}),
    "azure-native:network:PrivateDnsZoneGroup": (
        "network/resource-manager/Microsoft.Network/stable/2024-05-01/privateEndpoint.json",
        "PrivateDnsZoneGroups_CreateOrUpdate", {"id", "name"}),
    "azure-native:privatedns:PrivateZone": (
        "privatedns/resource-manager/Microsoft.Network/stable/2024-06-01/privatedns.json",
        "PrivateZones_CreateOrUpdate", {"location", "tags", "etag"}),
    "azure-native:privatedns:VirtualNetworkLink": (
        "privatedns/resource-manager/Microsoft.Network/stable/2024-06-01/privatedns.json",
        "VirtualNetworkLinks_CreateOrUpdate", {"location", "tags", "etag"}),
    "azure-native:keyvault:Vault": (
        "keyvault/resource-manager/Microsoft.KeyVault/stable/2024-11-01/keyvault.json",
        "Vaults_CreateOrUpdate", {"location", "tags", "properties"}),
    "azure-native:keyvault:Key": (
        "keyvault/resource-manager/Microsoft.KeyVault/stable/2024-11-01/keys.json",
        "Keys_CreateIfNotExist", {"tags", "properties"}),
    "azure-native:containerregistry:Registry": (
        "containerregistry/resource-manager/Microsoft.ContainerRegistry/preview/2023-01-01-preview/"
        "containerregistry.json", "Registries_Create", {"location", "tags", "sku", "identity"}),
    "azure-native:compute:DiskEncryptionSet": (
        "compute/resource-manager/Microsoft.Compute/DiskRP/stable/2024-03-02/diskEncryptionSet.json",
        "DiskEncryptionSets_CreateOrUpdate", {"location", "tags", "identity"}),
    "azure-native:monitor:DiagnosticSetting": (
        "monitor/resource-manager/Microsoft.Insights/preview/2021-05-01-preview/diagnosticsSettings_API.json",
        "DiagnosticSettings_CreateOrUpdate", set()),
    "azure-native:operationalinsights:Workspace": (
        "operationalinsights/resource-manager/Microsoft.OperationalInsights/stable/2023-09-01/Workspaces.json",
        "Workspaces_CreateOrUpdate", {"location", "tags", "identity", "etag"}),
}
SPEC_DATA = REPO / "tests" / "data" / "azure-rest-api"


@pytest.mark.parametrize("type_", sorted(OTHER_BODIES))
def test_the_other_azure_bodies_validate(type_: str, example_plans: dict[str, Plan]) -> None:
    spec_file, operation, top_level = OTHER_BODIES[type_]
    oracle = AksOpenApi(SPEC_DATA / spec_file)
    resources = [r for plan in example_plans.values() for r in plan.by_type(type_)]
    assert resources, f"the examples declare no {type_}"
    for resource in resources:
        assert oracle.validate_put(operation, resource.inputs, frozenset(top_level)) == [], resource.name


def test_a_misspelt_nested_field_is_still_caught_after_unflattening(example_plans: dict[str, Plan]) -> None:
    spec_file, operation, top_level = OTHER_BODIES["azure-native:network:NetworkSecurityGroup"]
    oracle = AksOpenApi(SPEC_DATA / spec_file)
    spec = edit(base_spec(), "network.vnet", {"mode": "create", "subnets": [{"name": "nodes", "cidr": "10.224.0.0/16"}],
                                              "inbound": [{"name": "web", "ports": [443], "sources": ["Internet"]}]})
    [group] = plan_spec(spec).by_type("azure-native:network:NetworkSecurityGroup")
    inputs = copy.deepcopy(group.inputs)
    inputs["securityRules"][0]["priorty"] = inputs["securityRules"][0].pop("priority")
    problems = oracle.validate_put(operation, inputs, frozenset(top_level))
    assert any("priorty" in problem for problem in problems) and any("priority" in problem for problem in problems)


def test_a_wrong_registry_body_is_caught(example_plans: dict[str, Plan]) -> None:
    spec_file, operation, top_level = OTHER_BODIES["azure-native:containerregistry:Registry"]
    oracle = AksOpenApi(SPEC_DATA / spec_file)
    [registry] = example_plans["prod"].by_type("azure-native:containerregistry:Registry")
    inputs = copy.deepcopy(registry.inputs)
    assert oracle.validate_put(operation, inputs, frozenset(top_level)) == []
    inputs["publicNetworkAccess"] = "Off"  # the API's enum is Enabled | Disabled
    inputs["anonymousPullEnable"] = inputs.pop("anonymousPullEnabled")
    problems = oracle.validate_put(operation, inputs, frozenset(top_level))
    assert any("Off" in problem for problem in problems)
    assert any("anonymousPullEnable" in problem for problem in problems)
