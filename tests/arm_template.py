"""The Azure resources of an offline plan as an ARM template, so that checkers that read ARM
(checkov's `arm` framework) judge the bodies aksgpu would send. Each Pulumi type maps to its ARM
type and the API version pulumi-azure-native 3.29.0 uses for it (its classes' docstrings, "Uses
Azure REST API version ..."; tests/test_public_checkers.py holds the table to them). Path
parameters become the resource's name; the other inputs go where the ARM body keeps them: the
listed top-level keys at the top, the rest under `properties`."""

from __future__ import annotations

import re
from typing import Any

from aksgpu.plan.planner import Plan

# Pulumi type: (ARM type, API version, the inputs that name it, parent first; top-level keys)
ARM_TYPES: dict[str, tuple[str, str, tuple[str, ...], frozenset[str]]] = {
    "azure-native:containerservice:ManagedCluster": (
        "Microsoft.ContainerService/managedClusters", "2025-09-01", ("resourceName",),
        frozenset({"location", "tags", "sku", "identity", "extendedLocation", "kind"})),
    "azure-native:containerservice:AgentPool": (
        "Microsoft.ContainerService/managedClusters/agentPools", "2025-09-01", ("resourceName", "agentPoolName"),
        frozenset()),
    "azure-native:containerregistry:Registry": (
        "Microsoft.ContainerRegistry/registries", "2023-01-01-preview", ("registryName",),
        frozenset({"location", "tags", "sku", "identity"})),
    "azure-native:operationalinsights:Workspace": (
        "Microsoft.OperationalInsights/workspaces", "2023-09-01", ("workspaceName",),
        frozenset({"location", "tags", "identity", "etag"})),
    "azure-native:keyvault:Vault": (
        "Microsoft.KeyVault/vaults", "2024-11-01", ("vaultName",), frozenset({"location", "tags", "properties"})),
    "azure-native:keyvault:Key": (
        "Microsoft.KeyVault/vaults/keys", "2024-11-01", ("vaultName", "keyName"), frozenset({"tags", "properties"})),
    "azure-native:compute:DiskEncryptionSet": (
        "Microsoft.Compute/diskEncryptionSets", "2024-03-02", ("diskEncryptionSetName",),
        frozenset({"location", "tags", "identity"})),
    "azure-native:network:VirtualNetwork": (
        "Microsoft.Network/virtualNetworks", "2024-05-01", ("virtualNetworkName",), frozenset({"location", "tags"})),
    "azure-native:network:Subnet": (
        "Microsoft.Network/virtualNetworks/subnets", "2024-05-01", ("virtualNetworkName", "subnetName"), frozenset()),
    "azure-native:network:NetworkSecurityGroup": (
        "Microsoft.Network/networkSecurityGroups", "2024-05-01", ("networkSecurityGroupName",),
        frozenset({"location", "tags"})),
    "azure-native:network:PrivateEndpoint": (
        "Microsoft.Network/privateEndpoints", "2024-05-01", ("privateEndpointName",),
        frozenset({"location", "tags", "extendedLocation"})),
    "azure-native:monitor:DiagnosticSetting": (
        "Microsoft.Insights/diagnosticSettings", "2021-05-01-preview", ("name",), frozenset()),
}
# Inputs that are part of the request URL, not the body.
URL_INPUTS = frozenset({"resourceGroupName", "resourceUri"})


def arm_resource(type_: str, inputs: dict[str, Any]) -> dict[str, Any]:
    """One resource of the template."""
    arm_type, api_version, name_inputs, top_level = ARM_TYPES[type_]
    if type_ == "azure-native:containerservice:ManagedCluster":
        inputs = cluster_arm_shape(inputs)
    resource: dict[str, Any] = {"type": arm_type, "apiVersion": api_version,
                                "name": "/".join(str(inputs.get(key, key)) for key in name_inputs)}
    properties: dict[str, Any] = {}
    for key, value in inputs.items():
        if key in name_inputs or key in URL_INPUTS:
            continue
        if key in top_level:
            resource[key] = value
        else:
            properties[key] = value
    if properties:
        resource["properties"] = properties
    return resource


def arm_template(plan: Plan) -> dict[str, Any]:
    """The template of every resource of the plan whose type ARM_TYPES maps."""
    return {
        "$schema": "https://schema.management.azure.com/schemas/2019-04-01/deploymentTemplate.json#",
        "contentVersion": "1.0.0.0",
        "resources": [arm_resource(r.type, r.inputs) for r in plan.resources if r.type in ARM_TYPES],
    }


def cluster_arm_shape(inputs: dict[str, Any]) -> dict[str, Any]:
    """The two renames pulumi-azure-native makes between a cluster's inputs and its ARM body:
    userAssignedIdentities is a list of IDs in Pulumi and a map keyed by ID in ARM, and the
    autoscaler profile's kebab-case ARM keys are camelCase in the provider's schema (e.g.
    @pulumi.getter(name="balanceSimilarNodeGroups") in the generated SDK)."""
    body = dict(inputs)
    if "identity" in body:
        ids = body["identity"].get("userAssignedIdentities", [])
        body["identity"] = {**body["identity"], "userAssignedIdentities": {i: {} for i in ids}}
    if "autoScalerProfile" in body:
        body["autoScalerProfile"] = {re.sub(r"[A-Z]", lambda m: "-" + m.group().lower(), key): value
                                     for key, value in body["autoScalerProfile"].items()}
    return body
