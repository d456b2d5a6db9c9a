"""The checks of the Azure resources around the cluster: the virtual network's subnets, the key
vaults and their keys, the container registry (and its diagnostic logs) and the Log Analytics
workspace, one function per rule of rules.yaml. Each registers itself (checks.py's tables) when
imported; the engine imports it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from aksgpu.policy.checks import (
    DIAGNOSTIC_SETTING_TYPE,
    MISSING,
    PolicyResource,
    REGISTRY_CATEGORIES,
    REGISTRY_TYPE,
    Violation,
    _enabled_categories,
    _expect,
    _of_type,
    resource_check,
    stack_check,
)


# --- the network ---------------------------------------------------------------------------

@resource_check("vnet-subnet-nsg")
def _subnet_nsg(subnet: PolicyResource) -> Iterator[Violation]:
    group = subnet.props.get("networkSecurityGroup")
    # Whether an NSG is referenced, not its ID (which a preview does not know before it exists).
    if not (isinstance(group, Mapping) and "id" in group):
        yield Violation(subnet, str(subnet.props.get("subnetName", subnet.name)), "networkSecurityGroup.id",
                        MISSING if group is None else group)


@resource_check("vnet-private-subnet")
def _private_subnet(subnet: PolicyResource) -> Iterator[Violation]:
    if subnet.props.get("defaultOutboundAccess") is not False:
        yield Violation(subnet, str(subnet.props.get("subnetName", subnet.name)), "defaultOutboundAccess",
                        subnet.props.get("defaultOutboundAccess", MISSING))


# --- key vaults ----------------------------------------------------------------------------

@resource_check("kv-key-hsm")
def _key_hsm(key: PolicyResource) -> Iterator[Violation]:
    yield from _expect(key, "properties.kty", lambda v: isinstance(v, str) and v.endswith("-HSM"))


@resource_check("kv-purge-protection")
def _purge_protection(vault: PolicyResource) -> Iterator[Violation]:
    yield from _expect(vault, "properties.enablePurgeProtection", lambda v: v is True)


@resource_check("kv-soft-delete")
def _soft_delete(vault: PolicyResource) -> Iterator[Violation]:
    # Soft delete is on unless turned off (Azure no longer lets it be off on new vaults).
    yield from _expect(vault, "properties.enableSoftDelete", lambda v: v is not False)


@resource_check("kv-firewall")
def _vault_firewall(vault: PolicyResource) -> Iterator[Violation]:
    yield from _expect(vault, "properties.networkAcls.defaultAction", lambda v: v == "Deny")


# --- the registry --------------------------------------------------------------------------

@resource_check("acr-admin-user")
def _admin_user(registry: PolicyResource) -> Iterator[Violation]:
    yield from _expect(registry, "adminUserEnabled", lambda v: v is False or v is MISSING)


@resource_check("acr-anonymous-pull")
def _anonymous_pull(registry: PolicyResource) -> Iterator[Violation]:
    yield from _expect(registry, "anonymousPullEnabled", lambda v: v is False or v is MISSING)


@resource_check("acr-public-network")
def _public_network(registry: PolicyResource) -> Iterator[Violation]:
    yield from _expect(registry, "publicNetworkAccess", lambda v: v == "Disabled")


@resource_check("acr-export")
def _export(registry: PolicyResource) -> Iterator[Violation]:
    yield from _expect(registry, "policies.exportPolicy.status", lambda v: v == "disabled")


@resource_check("acr-premium")
def _premium(registry: PolicyResource) -> Iterator[Violation]:
    yield from _expect(registry, "sku.name", lambda v: v == "Premium")


@resource_check("acr-zone-redundancy")
def _zone_redundancy(registry: PolicyResource) -> Iterator[Violation]:
    yield from _expect(registry, "zoneRedundancy", lambda v: v == "Enabled")


@resource_check("acr-retention")
def _retention(registry: PolicyResource) -> Iterator[Violation]:
    yield from _expect(registry, "policies.retentionPolicy.status", lambda v: v == "enabled")


@stack_check("acr-diagnostic-logs")
def _registry_logs(resources: Sequence[PolicyResource]) -> Iterator[Violation]:
    registries = _of_type(resources, REGISTRY_TYPE)
    if not registries:
        return
    categories: set[str] = set()
    for setting in _of_type(resources, DIAGNOSTIC_SETTING_TYPE):
        categories |= _enabled_categories(setting)
    if not REGISTRY_CATEGORIES <= categories:
        for registry in registries:
            yield Violation(registry, registry.name, "diagnosticSettings.logs",
                            sorted(categories & REGISTRY_CATEGORIES) or MISSING)


# --- the workspace -------------------------------------------------------------------------

@resource_check("log-local-auth")
def _local_auth(workspace: PolicyResource) -> Iterator[Violation]:
    yield from _expect(workspace, "features.disableLocalAuth", lambda v: v is True)
