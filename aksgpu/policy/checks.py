"""One function per rule of rules.yaml, reading resources as the engine receives them.

A resource is its Pulumi type, name and properties under their wire names (camelCase, as
`aksgpu plan --json` shows the inputs and as a Pulumi policy pack receives them). A check yields a
`Violation` for each place the rule is broken: the property path and the value found there
(MISSING when it is not set). Resource checks read a resource's inputs; stack checks read several
resources, whose properties in a real preview are their outputs, so they read names both ways
(configName or name). No check compares a value that is not known before deployment (an ID); in a
real preview, a policy that reads one is skipped for that resource and says so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aksgpu.policy.catalog import CLUSTER_TYPE, POOL_TYPE

REGISTRY_TYPE = "azure-native:containerregistry:Registry"
WORKSPACE_TYPE = "azure-native:operationalinsights:Workspace"
DIAGNOSTIC_SETTING_TYPE = "azure-native:monitor:DiagnosticSetting"
MAINTENANCE_TYPE = "azure-native:containerservice:MaintenanceConfiguration"


class _Missing:
    def __repr__(self) -> str:
        return "(not set)"


MISSING: Any = _Missing()


@dataclass(frozen=True)
class PolicyResource:
    """One declared resource: its URN, Pulumi type, logical name and input properties."""

    urn: str
    type: str
    name: str
    props: Mapping[str, Any]


@dataclass(frozen=True)
class Pool:
    """One node pool: inline in a ManagedCluster (agentPoolProfiles) or an AgentPool resource."""

    resource: PolicyResource
    name: str
    prefix: str  # the path of the pool's properties within the resource's inputs
    props: Mapping[str, Any]


@dataclass(frozen=True)
class Violation:
    resource: PolicyResource
    subject: str  # what the finding is about: a pool's name, otherwise the resource's name
    path: str
    value: Any


def value_at(props: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted path of mappings, or MISSING."""
    node: Any = props
    for key in path.split("."):
        if not isinstance(node, Mapping) or key not in node:
            return MISSING
        node = node[key]
    return node


def _known(props: Mapping[str, Any], key: str) -> Any:
    """props[key], or None when it is missing or not known yet: a policy pack's properties raise
    when a value the preview does not know is read (pulumi-policy's UnknownValueError)."""
    try:
        return props.get(key)
    except Exception:  # noqa: BLE001 - the pack's unknown-value error, which this module does not import
        return None


def _addon(props: Mapping[str, Any], name: str) -> tuple[str, Mapping[str, Any]]:
    """An add-on profile's key as written and its settings; AKS reads add-on names case-insensitively."""
    for key, value in (props.get("addonProfiles") or {}).items():
        if key.lower() == name.lower():
            return key, value if isinstance(value, Mapping) else {}
    return name, {}


def pools_of(resource: PolicyResource) -> Iterator[Pool]:
    if resource.type == CLUSTER_TYPE:
        for profile in resource.props.get("agentPoolProfiles") or []:
            name = str(profile.get("name", "?"))
            yield Pool(resource, name, f"agentPoolProfiles[name={name}].", profile)
    elif resource.type == POOL_TYPE:
        # agentPoolName among the inputs; name among the outputs a stack policy reads, which a
        # preview of a new pool does not know yet.
        name = resource.props.get("agentPoolName") or _known(resource.props, "name") or resource.name
        yield Pool(resource, str(name), "", resource.props)


def _is_system(pool: Pool) -> bool:
    return pool.props.get("mode") == "System"


def _is_spot(pool: Pool) -> bool:
    return pool.props.get("scaleSetPriority") == "Spot"


def _node_counts(pool: Pool) -> tuple[Any, str]:
    """The fewest nodes a pool keeps and the property that says so."""
    if pool.props.get("enableAutoScaling") is True:
        return pool.props.get("minCount", MISSING), "minCount"
    return pool.props.get("count", MISSING), "count"


ResourceCheck = Callable[[PolicyResource], Iterator[Violation]]
PoolCheck = Callable[[Pool], Iterator[Violation]]
StackCheck = Callable[[Sequence[PolicyResource]], Iterator[Violation]]
RESOURCE_CHECKS: dict[str, ResourceCheck] = {}
POOL_CHECKS: dict[str, PoolCheck] = {}
STACK_CHECKS: dict[str, StackCheck] = {}


def _register(table: dict[str, Any], rule_id: str) -> Callable[[Any], Any]:
    def add(function: Any) -> Any:
        table[rule_id] = function
        return function
    return add


def resource_check(rule_id: str) -> Callable[[ResourceCheck], ResourceCheck]:
    return _register(RESOURCE_CHECKS, rule_id)


def pool_check(rule_id: str) -> Callable[[PoolCheck], PoolCheck]:
    return _register(POOL_CHECKS, rule_id)


def stack_check(rule_id: str) -> Callable[[StackCheck], StackCheck]:
    return _register(STACK_CHECKS, rule_id)


def _expect(resource: PolicyResource, path: str, allowed: Callable[[Any], bool]) -> Iterator[Violation]:
    value = value_at(resource.props, path)
    if not allowed(value):
        yield Violation(resource, resource.name, path, value)


def _pool_expect(pool: Pool, key: str, allowed: Callable[[Any], bool]) -> Iterator[Violation]:
    value = pool.props.get(key, MISSING)
    if not allowed(value):
        yield Violation(pool.resource, pool.name, pool.prefix + key, value)


# --- the cluster ---------------------------------------------------------------------------

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
    yield from _expect(cluster, "networkProfile.loadBalancerSku",
                       lambda v: isinstance(v, str) and v.lower() == "standard")


@resource_check("aks-uptime-sla")
def _uptime_sla(cluster: PolicyResource) -> Iterator[Violation]:
    yield from _expect(cluster, "sku.tier", lambda v: v in {"Standard", "Premium"})


@resource_check("aks-auto-upgrade")
def _auto_upgrade(cluster: PolicyResource) -> Iterator[Violation]:
    yield from _expect(cluster, "autoUpgradeProfile.upgradeChannel", lambda v: v in {"patch", "stable", "rapid"})


@resource_check("aks-node-os-upgrade")
def _node_os_upgrade(cluster: PolicyResource) -> Iterator[Violation]:
    yield from _expect(cluster, "autoUpgradeProfile.nodeOSUpgradeChannel",
                       lambda v: v in {"NodeImage", "SecurityPatch"})


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


# --- node pools ----------------------------------------------------------------------------

@pool_check("pool-max-pods")
def _max_pods(pool: Pool) -> Iterator[Violation]:
    yield from _pool_expect(pool, "maxPods", lambda v: isinstance(v, int | float) and v >= 50)


@pool_check("pool-encryption-at-host")
def _encryption_at_host(pool: Pool) -> Iterator[Violation]:
    yield from _pool_expect(pool, "enableEncryptionAtHost", lambda v: v is True)


@pool_check("pool-node-public-ip")
def _node_public_ip(pool: Pool) -> Iterator[Violation]:
    yield from _pool_expect(pool, "enableNodePublicIP", lambda v: v is not True)


@pool_check("pool-ssh")
def _ssh(pool: Pool) -> Iterator[Violation]:
    value = value_at(pool.props, "securityProfile.sshAccess")
    if value != "Disabled":
        yield Violation(pool.resource, pool.name, pool.prefix + "securityProfile.sshAccess", value)


@pool_check("pool-scale-set")
def _scale_set(pool: Pool) -> Iterator[Violation]:
    yield from _pool_expect(pool, "type", lambda v: v == "VirtualMachineScaleSets")


@pool_check("pool-ephemeral-os-disk")
def _ephemeral_os_disk(pool: Pool) -> Iterator[Violation]:
    yield from _pool_expect(pool, "osDiskType", lambda v: v == "Ephemeral")


@pool_check("pool-zones")
def _zones(pool: Pool) -> Iterator[Violation]:
    yield from _pool_expect(pool, "availabilityZones", lambda v: isinstance(v, Sequence) and len(v) > 0)


@pool_check("pool-autoscaling")
def _autoscaling(pool: Pool) -> Iterator[Violation]:
    yield from _pool_expect(pool, "enableAutoScaling", lambda v: v is True)


@pool_check("pool-user-min-nodes")
def _user_min_nodes(pool: Pool) -> Iterator[Violation]:
    # Spot pools are left out, as PSRule does: they cannot promise any node.
    if _is_system(pool) or _is_spot(pool):
        return
    nodes, key = _node_counts(pool)
    if not (isinstance(nodes, int | float) and nodes >= 3):
        yield Violation(pool.resource, pool.name, pool.prefix + key, nodes)


@pool_check("system-critical-addons-only")
def _critical_addons_only(pool: Pool) -> Iterator[Violation]:
    if _is_system(pool):
        yield from _pool_expect(pool, "nodeTaints", lambda v: isinstance(v, Sequence)
                                and "CriticalAddonsOnly=true:NoSchedule" in v)


# --- across resources ----------------------------------------------------------------------

def _of_type(resources: Sequence[PolicyResource], type_: str) -> list[PolicyResource]:
    return [resource for resource in resources if resource.type == type_]


def _belongs_to(resource: PolicyResource, cluster: PolicyResource, clusters: Sequence[PolicyResource]) -> bool:
    """Whether a cluster's child resource (an AgentPool, a maintenance window) is `cluster`'s. With
    one cluster in the stack it is; only then are names compared, since a real preview does not
    know a new cluster's name yet (a policy reading an unknown value is skipped)."""
    if len(clusters) == 1:
        return True
    return resource.props.get("resourceName") == cluster.props.get("resourceName", cluster.name)


@stack_check("aks-pool-version")
def _pool_version(resources: Sequence[PolicyResource]) -> Iterator[Violation]:
    clusters = _of_type(resources, CLUSTER_TYPE)
    for resource in resources:
        if resource.type not in (CLUSTER_TYPE, POOL_TYPE):
            continue
        cluster = resource if resource.type == CLUSTER_TYPE else next(
            (c for c in clusters if _belongs_to(resource, c, clusters)), None)
        if cluster is None:
            continue
        version = cluster.props.get("kubernetesVersion", MISSING)
        for pool in pools_of(resource):
            pool_version = pool.props.get("orchestratorVersion", MISSING)
            if pool_version is not MISSING and version is not MISSING and pool_version != version:
                yield Violation(resource, pool.name, pool.prefix + "orchestratorVersion", pool_version)


@stack_check("system-min-nodes")
def _system_min_nodes(resources: Sequence[PolicyResource]) -> Iterator[Violation]:
    clusters = _of_type(resources, CLUSTER_TYPE)
    for cluster in clusters:
        system = [pool for resource in resources if resource is cluster or (
            resource.type == POOL_TYPE and _belongs_to(resource, cluster, clusters))
            for pool in pools_of(resource) if _is_system(pool)]
        counts = [_node_counts(pool)[0] for pool in system]
        total = sum(count for count in counts if isinstance(count, int | float))
        if total < 3 and system:
            first = system[0]
            yield Violation(first.resource, first.name, first.prefix + _node_counts(first)[1], total)


def _enabled_categories(setting: PolicyResource) -> set[str]:
    # By category: aksgpu's settings name them; a category group (allLogs) is not counted here.
    return {str(log.get("category")) for log in setting.props.get("logs") or []
            if isinstance(log, Mapping) and log.get("enabled") is True and log.get("category")}


# AKS's log categories tell its diagnostic settings apart from the registry's: their target IDs
# are not known before deployment.
AKS_CATEGORIES = frozenset({"kube-apiserver", "kube-audit", "kube-audit-admin", "kube-controller-manager",
                            "kube-scheduler", "cluster-autoscaler", "cloud-controller-manager", "guard",
                            "csi-azuredisk-controller",
                            "csi-azurefile-controller", "csi-snapshot-controller"})
REGISTRY_CATEGORIES = frozenset({"ContainerRegistryRepositoryEvents", "ContainerRegistryLoginEvents"})


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
