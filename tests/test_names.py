"""Names aksgpu derives obey Azure's naming rules (catalog/azure_names.yaml)."""

from __future__ import annotations

import re

import pytest

from aksgpu import catalog
from aksgpu.spec import SpecError, names, parse_cluster_spec
from tests.helpers import base_spec, edit, plan_spec

# Where each rule's resource keeps its Azure name in the plan: (Pulumi type, input).
NAME_INPUTS = {
    "Microsoft.OperationalInsights/workspaces": ("azure-native:operationalinsights:Workspace", "workspaceName"),
    "Microsoft.Monitor/accounts": ("azure-native:monitor:AzureMonitorWorkspace", "azureMonitorWorkspaceName"),
    "Microsoft.Insights/dataCollectionEndpoints": ("azure-native:monitor:DataCollectionEndpoint",
                                                   "dataCollectionEndpointName"),
    "Microsoft.Insights/dataCollectionRules": ("azure-native:monitor:DataCollectionRule", "dataCollectionRuleName"),
    "Microsoft.Network/virtualNetworks": ("azure-native:network:VirtualNetwork", "virtualNetworkName"),
    "Microsoft.Network/natGateways": ("azure-native:network:NatGateway", "natGatewayName"),
    "Microsoft.Network/networkSecurityGroups": ("azure-native:network:NetworkSecurityGroup",
                                                "networkSecurityGroupName"),
    "Microsoft.Network/privateEndpoints": ("azure-native:network:PrivateEndpoint", "privateEndpointName"),
    "Microsoft.KeyVault/vaults": ("azure-native:keyvault:Vault", "vaultName"),
    "Microsoft.ContainerRegistry/registries": ("azure-native:containerregistry:Registry", "registryName"),
    "Microsoft.Compute/diskEncryptionSets": ("azure-native:compute:DiskEncryptionSet", "diskEncryptionSetName"),
    "Microsoft.Network/publicIPAddresses": ("azure-native:network:PublicIPAddress", "publicIpAddressName"),
    "Microsoft.ManagedIdentity/userAssignedIdentities": ("azure-native:managedidentity:UserAssignedIdentity",
                                                         "resourceName"),
    "Microsoft.ContainerService/managedClusters/nodeResourceGroup": ("azure-native:containerservice:ManagedCluster",
                                                                     "nodeResourceGroup"),
}
# Rows for names only the user sets or passes inside a resource ID (spec/names.py check_name,
# spec/resource_ids.py): no name aksgpu derives follows them.
USER_NAMES = {"Microsoft.Network/virtualNetworks/subnets", "Microsoft.Network/networkSecurityGroups/securityRules",
              "Microsoft.Resources/resourceGroups", "Microsoft.KeyVault/vaults/keys", "Microsoft.Insights/actionGroups"}


def _obeys(resource_type: str, name: str) -> bool:
    rule = catalog.load("azure_names")["rules"][resource_type]
    return rule["min"] <= len(name) <= rule["max"] and re.fullmatch(rule["pattern"], name) is not None


def test_every_rule_has_a_source_and_a_plan_input() -> None:
    rules = catalog.load("azure_names")["rules"]
    assert set(rules) == set(NAME_INPUTS) | USER_NAMES
    assert all(rule["source"] and rule["rule"] for rule in rules.values())


def test_the_longest_valid_names_plan_only_names_azure_accepts() -> None:
    # A long cluster name with a long region name, and every derived resource switched on.
    spec = edit(base_spec(), "name", "c" * 56)
    spec = edit(spec, "location", "southcentralusstg")
    spec = edit(spec, "monitoring.managedPrometheus", True)
    spec = edit(spec, "gpuHealth.metrics.scraper", "managedPrometheus")
    spec = edit(spec, "network.outbound", "userAssignedNATGateway")
    spec = edit(spec, "network.outboundIps", 100)
    spec = edit(spec, "network.vnet", {"mode": "create", "addressSpace": ["10.224.0.0/12"],
                                       "subnets": [{"name": "nodes", "cidr": "10.224.0.0/16"}]})
    spec = edit(spec, "registry.publicNetworkAccess", False)  # its private endpoint
    spec = edit(spec, "security.kms", {"mode": "create", "networkAccess": "Public"})  # the KMS vault
    spec = edit(spec, "security.diskEncryption", {"mode": "create"})  # the disk encryption set
    _, warnings = parse_cluster_spec(spec)  # valid, or this test does not test what it says
    plan = plan_spec(spec)
    checked = 0
    for resource_type, (pulumi_type, field) in NAME_INPUTS.items():
        for resource in plan.by_type(pulumi_type):
            name = resource.inputs.get(field)
            assert isinstance(name, str), (resource_type, resource.name)
            checked += 1
            if _obeys(resource_type, name):
                continue
            # A limit seen only in Microsoft's templates is a warning that names the derived name.
            assert catalog.load("azure_names")["rules"][resource_type].get("severity") == "warning", \
                (resource_type, name)
            assert any(f'"{name}"' in w.rule for w in warnings), (name, warnings)
    assert checked >= len(NAME_INPUTS)


def test_the_endpoint_name_is_cut_to_44_characters_without_a_trailing_dash() -> None:
    name = names.prometheus_endpoint("southafricanorth", "gpu-" + "x" * 40)
    assert len(name) <= 44 and not name.endswith("-") and name.startswith("MSProm-southafricanorth-gpu-")


@pytest.mark.parametrize(("edits", "resource"), [
    ([("name", "gpu_prod")], "Log Analytics workspace"),
    ([("name", "a" * 60)], "Log Analytics workspace"),
    ([("resourceGroup.name", "r" + "." * 85 + "x")], "node resource group"),
])
def test_a_bad_derived_name_names_the_field_and_the_way_out(edits: list, resource: str) -> None:
    spec = base_spec()
    for path, value in edits:
        spec = edit(spec, path, value)
    with pytest.raises(SpecError) as raised:
        parse_cluster_spec(spec)
    issue = next(i for i in raised.value.errors if resource in i.rule)
    assert issue.path == edits[0][0] and issue.value == edits[0][1]
    assert "breaks Azure's rule" in issue.rule and issue.fix


def test_setting_the_name_explicitly_clears_the_derived_name_error() -> None:
    spec = edit(edit(base_spec(), "name", "gpu_prod"), "monitoring.logAnalytics.name", "gpu-prod-logs")
    parse_cluster_spec(spec)
