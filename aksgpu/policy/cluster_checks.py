"""The checks of the cluster itself: one function per cluster rule of rules.yaml, reading the
ManagedCluster's inputs (identity and access, the API server, networking, upgrades, add-ons,
encryption), and the stack checks of what the cluster's own settings resources say: its
diagnostic settings (audit and platform logs) and its maintenance windows. Each registers itself
(checks.py's tables) when imported; the engine imports it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from aksgpu.policy.catalog import CLUSTER_TYPE
from aksgpu.policy.checks import (
    AKS_CATEGORIES,
    DIAGNOSTIC_SETTING_TYPE,
    MAINTENANCE_TYPE,
    MISSING,
    PolicyResource,
    Violation,
    _addon,
    _belongs_to,
    _enabled_categories,
    _expect,
    _of_type,
    resource_check,
    stack_check,
    value_at,
)


@resource_check("aks-rbac")
def _rbac(cluster: PolicyResource) -> Iterator[Violation]:
    yield from _expect(cluster, "enableRBAC", lambda v: v is True)


@resource_check("aks-managed-aad")
def _managed_aad(cluster: PolicyResource) -> Iterator[Violation]:
    yield from _expect(cluster, "aadProfile.managed", lambda v: v is True)


@resource_check("aks-azure-rbac")
def _azure_rbac(cluster: PolicyResource) -> Iterator[Violation]:
    yield from _expect(cluster, "aadProfile.enableAzureRBAC", lambda v: v is True)


@resource_check("aks-local-accounts")
def _local_accounts(cluster: PolicyResource) -> Iterator[Violation]:
    yield from _expect(cluster, "disableLocalAccounts", lambda v: v is True)


@resource_check("aks-managed-identity")
def _managed_identity(cluster: PolicyResource) -> Iterator[Violation]:
    yield from _expect(cluster, "identity.type",
                       lambda v: isinstance(v, str) and v.replace(" ", "").lower() in
                       {"systemassigned", "userassigned", "systemassigned,userassigned"})


@resource_check("aks-api-server-access")
def _api_server_access(cluster: PolicyResource) -> Iterator[Violation]:
    access = value_at(cluster.props, "apiServerAccessProfile")
    private = isinstance(access, Mapping) and access.get("enablePrivateCluster") is True
    ranges = access.get("authorizedIPRanges") if isinstance(access, Mapping) else None
    if not private and not ranges:
        yield Violation(cluster, cluster.name, "apiServerAccessProfile.authorizedIPRanges",
                        MISSING if ranges is None else ranges)


@resource_check("aks-network-policy")
def _network_policy(cluster: PolicyResource) -> Iterator[Violation]:
    yield from _expect(cluster, "networkProfile.networkPolicy", lambda v: v in {"azure", "calico", "cilium"})


@resource_check("aks-standard-load-balancer")
def _standard_lb(cluster: PolicyResource) -> Iterator[Violation]:
    yield from _expect(cluster, "networkProfile.loadBalancerSku", lambda v: isinstance(v,
                                                                                       str) and v.lower() == "standard")


@resource_check("aks-uptime-sla")
def _uptime_sla(cluster: PolicyResource) -> Iterator[Violation]:
    yield from _expect(cluster, "sku.tier", lambda v: v in {"Standard", "Premium"})


@resource_check("aks-auto-upgrade")
def _auto_upgrade(cluster: PolicyResource) -> Iterator[Violation]:
    yield from _expect(cluster, "autoUpgradeProfile.upgradeChannel", lambda v: v in {"patch", "stable", "rapid"})


@resource_check("aks-node-os-upgrade")
def _node_os_upgrade(cluster: PolicyResource) -> Iterator[Violation]:
    yield from _expect(cluster, "autoUpgradeProfile.nodeOSUpgradeChannel", lambda v: v in {"NodeImage",
                                                                                           "SecurityPatch"})


def _addon_enabled(cluster: PolicyResource, name: str, wanted: bool) -> Iterator[Violation]:
    key, addon = _addon(cluster.props, name)
    enabled = addon.get("enabled", MISSING) if addon else MISSING
    if (enabled is True) != wanted:
        yield Violation(cluster, cluster.name, f"addonProfiles.{key}.enabled", enabled)


@resource_check("aks-container-insights")
def _container_insights(cluster: PolicyResource) -> Iterator[Violation]:
    yield from _addon_enabled(cluster, "omsagent", True)


@resource_check("aks-defender")
def _defender(cluster: PolicyResource) -> Iterator[Violation]:
    yield from _expect(cluster, "securityProfile.defender.securityMonitoring.enabled", lambda v: v is True)


@resource_check("aks-azure-policy")
def _azure_policy(cluster: PolicyResource) -> Iterator[Violation]:
    yield from _addon_enabled(cluster, "azurepolicy", True)


@resource_check("aks-secret-store")
def _secret_store(cluster: PolicyResource) -> Iterator[Violation]:
    yield from _addon_enabled(cluster, "azureKeyvaultSecretsProvider", True)


@resource_check("aks-secret-rotation")
def _secret_rotation(cluster: PolicyResource) -> Iterator[Violation]:
    key, addon = _addon(cluster.props, "azureKeyvaultSecretsProvider")
    if addon.get("enabled") is True:
        rotation = value_at(addon, "config.enableSecretRotation")
        # The API's config values are strings: "true", as PSRule expects (checkov's ARM check wants a boolean).
        if rotation != "true":
            yield Violation(cluster, cluster.name, f"addonProfiles.{key}.config.enableSecretRotation", rotation)


@resource_check("aks-http-application-routing")
def _http_application_routing(cluster: PolicyResource) -> Iterator[Violation]:
    yield from _addon_enabled(cluster, "httpApplicationRouting", False)


@resource_check("aks-kube-dashboard")
def _kube_dashboard(cluster: PolicyResource) -> Iterator[Violation]:
    yield from _addon_enabled(cluster, "kubeDashboard", False)


@resource_check("aks-image-cleaner")
def _image_cleaner(cluster: PolicyResource) -> Iterator[Violation]:
    yield from _expect(cluster, "securityProfile.imageCleaner.enabled", lambda v: v is True)


@resource_check("aks-run-command")
def _run_command(cluster: PolicyResource) -> Iterator[Violation]:
    yield from _expect(cluster, "apiServerAccessProfile.disableRunCommand", lambda v: v is True)


@resource_check("aks-kms")
def _kms(cluster: PolicyResource) -> Iterator[Violation]:
    yield from _expect(cluster, "securityProfile.azureKeyVaultKms.enabled", lambda v: v is True)


@resource_check("aks-disk-encryption-set")
def _disk_encryption_set(cluster: PolicyResource) -> Iterator[Violation]:
    yield from _expect(cluster, "diskEncryptionSetID", lambda v: isinstance(v, str) and v != "")


def _cluster_logs(resources: Sequence[PolicyResource]) -> tuple[PolicyResource | None, set[str]]:
    """The cluster (if any) and every log category its diagnostic settings enable."""
    clusters = _of_type(resources, CLUSTER_TYPE)
    categories: set[str] = set()
    for setting in _of_type(resources, DIAGNOSTIC_SETTING_TYPE):
        enabled = _enabled_categories(setting)
        if enabled & AKS_CATEGORIES:
            categories |= enabled
    return (clusters[0] if clusters else None), categories


@stack_check("aks-audit-logs")
def _audit_logs(resources: Sequence[PolicyResource]) -> Iterator[Violation]:
    cluster, categories = _cluster_logs(resources)
    if cluster is None:
        return
    missing = sorted({"guard"} - categories) + ([] if categories & {"kube-audit", "kube-audit-admin"}
                                                else ["kube-audit-admin"])
    if missing:
        yield Violation(cluster, cluster.name, "diagnosticSettings.logs", sorted(categories) or MISSING)


@stack_check("aks-audit-admin")
def _audit_admin(resources: Sequence[PolicyResource]) -> Iterator[Violation]:
    cluster, categories = _cluster_logs(resources)
    if cluster is not None and "kube-audit" in categories:
        yield Violation(cluster, cluster.name, "diagnosticSettings.logs[category=kube-audit].enabled", True)


PLATFORM_CATEGORIES = ("cluster-autoscaler", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


@stack_check("aks-platform-logs")
def _platform_logs(resources: Sequence[PolicyResource]) -> Iterator[Violation]:
    cluster, categories = _cluster_logs(resources)
    if cluster is None:
        return
    if any(category not in categories for category in PLATFORM_CATEGORIES):
        yield Violation(cluster, cluster.name, "diagnosticSettings.logs", sorted(categories) or MISSING)


MAINTENANCE_CONFIGS = ("aksManagedAutoUpgradeSchedule", "aksManagedNodeOSUpgradeSchedule")


@stack_check("aks-maintenance-window")
def _maintenance_window(resources: Sequence[PolicyResource]) -> Iterator[Violation]:
    clusters = _of_type(resources, CLUSTER_TYPE)
    for cluster in clusters:
        declared = {m.props.get("configName") or m.props.get("name") for m in _of_type(resources, MAINTENANCE_TYPE)
                    if _belongs_to(m, cluster, clusters)}
        missing = [config for config in MAINTENANCE_CONFIGS if config not in declared]
        if missing:
            yield Violation(cluster, cluster.name, "maintenanceConfigurations",
                            sorted(c for c in declared if c) or MISSING)
