"""Names aksgpu derives for Azure resources, and the check that each obeys Azure's rule.

A valid cluster name can still derive an invalid name (a cluster "gpu_prod" gives the workspace
"gpu_prod-logs", which Log Analytics refuses; a 60-character one gives a 65-character VNet
name). The components take their names from the functions here, and `check_derived_names`
holds every name the spec would derive against its rule (aksgpu/catalog/azure_names.yaml),
naming the field to change.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pydantic import AfterValidator

from aksgpu import catalog

from aksgpu.spec.base import Issue, rule_error

if TYPE_CHECKING:
    from aksgpu.spec import ClusterSpec

# AKS's managed-Prometheus template cuts the endpoint name to the service's 44 characters.
_ENDPOINT_MAX = 44


def log_analytics_workspace(cluster_name: str) -> str:
    return f"{cluster_name}-logs"


def prometheus_workspace(cluster_name: str) -> str:
    return f"{cluster_name}-prometheus"


def container_insights_rule(location: str, cluster_name: str) -> str:
    return f"MSCI-{location}-{cluster_name}"


def prometheus_rule(location: str, cluster_name: str) -> str:
    return f"MSProm-{location}-{cluster_name}"


def prometheus_endpoint(location: str, cluster_name: str) -> str:
    return f"MSProm-{location}-{cluster_name}"[:_ENDPOINT_MAX].rstrip("-")


def vnet(cluster_name: str) -> str:
    return f"{cluster_name}-vnet"


def nat_gateway(cluster_name: str) -> str:
    return f"{cluster_name}-nat"


def nat_public_ip(cluster_name: str, index: int) -> str:
    return f"{cluster_name}-nat-ip-{index}"


def network_security_group(cluster_name: str, subnet: str) -> str:
    return f"{cluster_name}-{subnet}-nsg"


def registry_private_endpoint(cluster_name: str) -> str:
    return f"{cluster_name}-acr-pe"


def disk_encryption_set(cluster_name: str) -> str:
    return f"{cluster_name}-disks"


def identity(cluster_name: str, role: str) -> str:
    """The user-assigned identity of the cluster's control plane or kubelet."""
    return f"{cluster_name}-{role}"


def node_resource_group(resource_group: str, cluster_name: str) -> str:
    return f"{resource_group}-{cluster_name}-nodes"[:80]


# --- names that are global in Azure ------------------------------------------------------------
# A registry's name is its login server <name>.azurecr.io and a vault's its URI <name>.vault.azure.net:
# both are unique across all of Azure, not only the subscription (Learn, "Naming rules and
# restrictions for Azure resources", Microsoft.ContainerRegistry registries and Microsoft.KeyVault
# vaults, scope "global"; catalog/azure_names.yaml, checked 2026-11-27). Two environments (or two
# teams) with a cluster named gpu-prod would both derive gpuprodacr from the cluster name alone.
# For a new environment `aksgpu render` therefore writes a name with a suffix from what tells
# clusters apart (environments/global_names.py); a spec without a name (a stack rendered before)
# keeps the suffix-less derivation (spec/registry.py default_registry_name, spec/security.py
# key_vault_name), so no upgrade renames an existing registry or vault.

SUFFIX_LENGTH = 6
_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"


def global_suffix(resource_group: str, location: str, cluster_name: str) -> str:
    """Six lowercase base-36 characters (about 31 bits) of the SHA-256 of the resource group,
    location and cluster name: what identifies one cluster in a subscription. The same on every
    machine and every plan; Azure treats these names case-insensitively, so they are casefolded."""
    identity = "\0".join(part.casefold() for part in (resource_group, location, cluster_name))
    number = int.from_bytes(hashlib.sha256(identity.encode()).digest()[:8], "big")
    digits = []
    for _ in range(SUFFIX_LENGTH):
        number, digit = divmod(number, 36)
        digits.append(_BASE36[digit])
    return "".join(digits)


def suffixed_registry(cluster_name: str, suffix: str) -> str:
    """<cluster's letters and digits, lowercased>acr<suffix>: 5-50 letters and digits."""
    base = re.sub(r"[^a-zA-Z0-9]", "", cluster_name).lower()[:50 - 3 - len(suffix)]
    return f"{base}acr{suffix}"


def legacy_key_vault(cluster_name: str) -> str:
    """The vault name aksgpu derived before names had a suffix: "<cluster name>-kms", cut to 24."""
    base = re.sub(r"[^a-zA-Z0-9-]", "-", cluster_name)
    return re.sub(r"-+", "-", f"{base}-kms"[:24]).strip("-")


def suffixed_key_vault(cluster_name: str, suffix: str) -> str:
    """<cluster name, cut>-kms-<suffix>: 3-24 letters, digits and single '-', starting with a letter."""
    base = re.sub(r"-+", "-", re.sub(r"[^a-zA-Z0-9-]", "-", cluster_name)).strip("-")
    if not base[:1].isalpha():
        base = f"kv{base}"
    base = base[:24 - len("-kms-") - len(suffix)].rstrip("-")
    return f"{base}-kms-{suffix}"


def obeys(resource_type: str, name: str) -> bool:
    """Whether `name` keeps Azure's naming rule for `resource_type` (data/azure_names.yaml)."""
    rule = catalog.load("azure_names")["rules"][resource_type]
    return rule["min"] <= len(name) <= rule["max"] and re.fullmatch(rule["pattern"], name) is not None


def rule_of(resource_type: str) -> dict:
    """Azure's naming rule for `resource_type` (catalog/azure_names.yaml rules)."""
    return catalog.load("azure_names")["rules"][resource_type]


def article(label: str) -> str:
    """`label` with "a" or "an" before it."""
    return f"an {label}" if label[:1].lower() in "aeiou" else f"a {label}"


def broken_rule(resource_type: str) -> str:
    """What a name the user sets breaks, as a message says it."""
    rule = rule_of(resource_type)
    return f"breaks Azure's rule for {article(rule['label'])} name ({resource_type}): {rule['rule']}"


def check_name(path: str, name: str, resource_type: str, fix: str) -> Iterator[Issue]:
    """An Issue when a name the user sets for an Azure resource breaks its type's rule: the same
    table as the names aksgpu derives (catalog/azure_names.yaml, each row with its source)."""
    if obeys(resource_type, name):
        return
    yield Issue(path, name, broken_rule(resource_type), fix, rule_of(resource_type).get("severity", "error"))


def named(resource_type: str, fix: str) -> AfterValidator:
    """A field validator: a name the field gives an Azure resource keeps its type's rule (check_name,
    where the field alone decides)."""

    def validate(value: Any) -> Any:
        if isinstance(value, str) and not obeys(resource_type, value):
            raise rule_error(broken_rule(resource_type), fix)
        return value

    return AfterValidator(validate)


def check_derived_names(spec: ClusterSpec) -> Iterator[Issue]:
    """Every name the spec derives that breaks its resource type's rule, at the field to change."""
    rename = "shorten or rename the cluster (name)"
    # (resource type, derived name, the field it derives from, fix)
    derived: list[tuple[str, str, str, str]] = [
        ("Microsoft.ManagedIdentity/userAssignedIdentities", identity(spec.name, "control-plane"), "name", rename),
        ("Microsoft.ContainerService/managedClusters/nodeResourceGroup",
         node_resource_group(spec.resource_group.name, spec.name), "resourceGroup.name",
         "shorten the resource group or cluster name, or end the resource group name with a letter or digit"),
    ]
    log_analytics = spec.monitoring.log_analytics
    if log_analytics.mode == "create" and log_analytics.name is None:
        derived.append(("Microsoft.OperationalInsights/workspaces", log_analytics_workspace(spec.name), "name",
                        f"{rename}, or set monitoring.logAnalytics.name"))
    if log_analytics.mode != "none" and spec.monitoring.container_insights:
        derived.append(("Microsoft.Insights/dataCollectionRules", container_insights_rule(spec.location, spec.name),
                        "name", rename))
    if spec.monitoring.managed_prometheus:
        derived += [
            ("Microsoft.Monitor/accounts", prometheus_workspace(spec.name), "name",
             f"{rename}, with letters, digits and '-' only"),
            ("Microsoft.Insights/dataCollectionRules", prometheus_rule(spec.location, spec.name), "name", rename),
            ("Microsoft.Insights/dataCollectionEndpoints", prometheus_endpoint(spec.location, spec.name), "name",
             rename),
        ]
    vnet_spec = spec.network.vnet
    if vnet_spec.mode == "create" and vnet_spec.name is None:
        derived.append(("Microsoft.Network/virtualNetworks", vnet(spec.name), "name",
                        f"{rename}, or set network.vnet.name"))
    if vnet_spec.mode == "create":
        # A subnet name that breaks the subnet rule is reported at the subnet (spec/network.py), once.
        derived += [("Microsoft.Network/networkSecurityGroups", network_security_group(spec.name, subnet.name), "name",
                     f"{rename}, or the subnet ({subnet.name})") for subnet in vnet_spec.subnets
                    if obeys("Microsoft.Network/virtualNetworks/subnets", subnet.name)]
    if spec.registry.mode == "create" and not spec.registry.public_network_access:
        derived.append(("Microsoft.Network/privateEndpoints", registry_private_endpoint(spec.name), "name", rename))
    if spec.security.disk_encryption.mode == "create":
        derived.append(("Microsoft.Compute/diskEncryptionSets", disk_encryption_set(spec.name), "name", rename))
    if spec.network.outbound == "userAssignedNATGateway":
        derived += [
            ("Microsoft.Network/natGateways", nat_gateway(spec.name), "name", rename),
            ("Microsoft.Network/publicIPAddresses", nat_public_ip(spec.name, spec.network.outbound_ips - 1), "name",
             rename),
        ]
    values = {"name": spec.name, "resourceGroup.name": spec.resource_group.name}
    for resource_type, name, path, fix in derived:
        if obeys(resource_type, name):
            continue
        rule = catalog.load("azure_names")["rules"][resource_type]
        yield Issue(path, values[path],
                    f'the {rule["label"]} name aksgpu derives from it, "{name}" ({len(name)} characters), breaks '
                    f'Azure\'s rule for {resource_type}: {rule["rule"]}', fix, rule.get("severity", "error"))
