"""The control plane AKS runs for you: version, tier, upgrades, API server access, autoscaler."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field

from aksgpu import catalog

from aksgpu.spec.base import Issue, SpecModel, checked
from aksgpu.spec.gpu_startup import check_autoscaler_profile, derived_autoscaler
from aksgpu.spec.kubernetes_apis import check_kubernetes_apis
from aksgpu.spec.resource_ids import check_zone_id

if TYPE_CHECKING:
    from aksgpu.spec import ClusterSpec

KUBERNETES_VERSION = re.compile(r"^\d+\.\d+(\.\d+)?$")
HHMM = re.compile(r"^([01]\d|2[0-3]):[0-5]\d$")
UTC_OFFSET = re.compile(r"^[+-](0\d|1[0-4]):[0-5]\d$")

KubernetesVersion = Annotated[
    str,
    checked(KUBERNETES_VERSION.fullmatch, "must be major.minor or major.minor.patch",
            'write it like "1.35" (quoted, so YAML keeps it a string)'),
]
TimeOfDay = Annotated[str, checked(HHMM.fullmatch, "must be a 24-hour time HH:MM", 'write it like "02:00"')]
UtcOffset = Annotated[str, checked(UTC_OFFSET.fullmatch, "must be +HH:MM or -HH:MM", 'write it like "+00:00"')]
DayOfWeek = Literal["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]

# ARM names of the two planned-maintenance configurations AKS reads.
MAINTENANCE_CONFIG_NAMES = {
    "autoUpgrade": "aksManagedAutoUpgradeSchedule",
    "nodeOsUpgrade": "aksManagedNodeOSUpgradeSchedule",
}


class MaintenanceWindow(SpecModel):
    """A weekly window for cluster upgrades (autoUpgrade) or node image updates (nodeOsUpgrade)."""

    schedule: Literal["autoUpgrade", "nodeOsUpgrade"]
    """Which upgrades the window is for: autoUpgrade (cluster upgrades from upgradeChannel) or nodeOsUpgrade (node image updates from nodeOsUpgradeChannel). AKS keeps one window per schedule."""
    day_of_week: DayOfWeek = "Sunday"
    """Day of the week the window opens."""
    interval_weeks: int = Field(default=1, ge=1, le=4)
    """The window opens every this many weeks, 1 to 4."""
    start_time: TimeOfDay = "02:00"
    """Time of day the window opens, 24-hour HH:MM in utcOffset's time zone."""
    duration_hours: int = Field(default=4, ge=4, le=24)
    """Length of the window in hours, 4 to 24 (the range AKS accepts)."""
    utc_offset: UtcOffset = "+00:00"
    """Offset from UTC of startTime, +HH:MM or -HH:MM."""


class ApiServer(SpecModel):
    """How the API server is reached: a public endpoint (optionally limited to authorized IP
    ranges) or a private one, optionally projected into a delegated subnet (VNet integration)."""

    access: Literal["public", "private"] = "public"
    """public: the API server has a public endpoint; private: a private cluster, whose API server is reachable only from the VNet and networks connected to it."""
    vnet_integration: bool = False
    """Project the API server into a delegated subnet of the cluster's VNet (API Server VNet Integration). With your own VNet it needs `subnet`; with an AKS-managed VNet AKS creates that subnet. AKS cannot turn it off once on."""
    subnet: str | None = None
    """Name of the subnet in network.vnet.subnets for the API server, a /28 or larger used by nothing else (aksgpu delegates it when it creates it). Only with vnetIntegration and vnet.mode create or existing."""
    authorized_ip_ranges: list[str] = Field(default_factory=list)
    """Public IPv4 addresses or CIDRs allowed to reach a public API server: at most 200 (2,000 with vnetIntegration); "0.0.0.0/32" alone allows only the cluster's outbound IP. Empty: any address may reach it. Not for access: private."""
    private_dns_zone: str = "system"
    """Private DNS zone of a private API server: "system" (AKS creates and manages it), "none", or the resource ID of your own private DNS zone, which AKS takes only named privatelink.<location>.azmk8s.io or <subzone>.privatelink.<location>.azmk8s.io (subzone at most 32 characters; with vnetIntegration also private.<location>.azmk8s.io), <location> the cluster's region. Only for access: private."""


class Autoscaler(SpecModel):
    """Cluster autoscaler settings (the cluster's autoScalerProfile)."""

    expander: Literal["least-waste", "most-pods", "priority", "random"] = "least-waste"
    """How the autoscaler picks the pool to grow when several could fit the pending pods (the autoscaler's expander)."""
    balance_similar_node_groups: bool = True
    """Keep pools with the same VM size and labels at similar sizes when scaling, e.g. the per-zone pools of a perZone pool."""
    scan_interval_seconds: int = Field(default=10, ge=1, le=600)
    """How often, in seconds (1-600), the autoscaler re-evaluates the cluster for scaling up or down."""
    scale_down_delay_after_add_minutes: int = Field(default=10, ge=0, le=1440)
    """Minutes (0-1440) after a scale-up before the autoscaler considers scaling down again."""
    scale_down_unneeded_minutes: int = Field(default=10, ge=1, le=1440)
    """Minutes (1-1440) a node must be unneeded before the autoscaler removes it."""
    max_node_provision_minutes: int | None = Field(default=None, ge=1, le=120)
    """Minutes (1-120) the autoscaler waits for the nodes of a scale-up before it gives up on them and backs the pool off (max-node-provision-time). A new GPU node counts as arriving until the gate's verdict (up to 15 minutes after it joins). None: derived from the gated GPU pools, AKS's 15 minutes plus that time (15 without gated pools)."""
    ok_total_unready_count: int | None = Field(default=None, ge=0, le=5000)
    """Unready nodes (0-5000) the autoscaler tolerates whatever their share (ok-total-unready-count); it stops scaling the whole cluster once unready nodes exceed both this and maxTotalUnreadyPercentage. A GPU node still under the gate's check 15 minutes after it joins, held by the breaker, or failed and kept counts as unready. None: the most nodes the gated GPU pools can have at once (their maxCount, with upgrade surge), or AKS's 3 if that is higher."""
    max_total_unready_percentage: int | None = Field(default=None, ge=0, le=100)
    """Share of all nodes, in percent (0-100), that may be unready before the autoscaler stops scaling the whole cluster, once unready nodes also exceed okTotalUnreadyCount (max-total-unready-percentage). None: AKS's 45 (okTotalUnreadyCount alone keeps the gated GPU pools from stopping the autoscaler)."""
    max_graceful_termination_seconds: int = Field(default=600, ge=0, le=86400)
    """Seconds (0-86400) the autoscaler waits for a node's pods to terminate gracefully when scaling it down."""
    skip_nodes_with_local_storage: bool = False
    """Never scale down nodes whose pods use local storage (emptyDir or hostPath volumes)."""

    def profile(self, spec: ClusterSpec) -> dict[str, str]:
        """The autoScalerProfile as pulumi-azure-native input (string values, as the API takes them).
        Fields left unset take the values the spec's gated GPU pools need (spec/gpu_startup.py);
        okTotalUnreadyCount is left to AKS where its default does, maxTotalUnreadyPercentage unless set."""
        derived = derived_autoscaler(spec)
        provision = self.max_node_provision_minutes or derived.max_node_provision_minutes
        count = self.ok_total_unready_count if self.ok_total_unready_count is not None \
            else derived.ok_total_unready_count
        percentage = self.max_total_unready_percentage
        profile = {
            "balance_similar_node_groups": str(self.balance_similar_node_groups).lower(),
            "expander": self.expander,
            "max_graceful_termination_sec": str(self.max_graceful_termination_seconds),
            "max_node_provision_time": f"{provision}m",
            "scale_down_delay_after_add": f"{self.scale_down_delay_after_add_minutes}m",
            "scale_down_unneeded_time": f"{self.scale_down_unneeded_minutes}m",
            "scan_interval": f"{self.scan_interval_seconds}s",
            "skip_nodes_with_local_storage": str(self.skip_nodes_with_local_storage).lower(),
        }
        # Sent only when set or needed: AKS's defaults otherwise, and an unchanged body stays unchanged.
        if count is not None:
            profile["ok_total_unready_count"] = str(count)
        if percentage is not None:
            profile["max_total_unready_percentage"] = str(percentage)
        return profile


class ControlPlane(SpecModel):
    """Version, tier and upgrade policy of the managed control plane."""

    kubernetes_version: KubernetesVersion | None = None
    """Kubernetes version of the control plane and every pool, "major.minor" or "major.minor.patch" (quote it in YAML, e.g. "1.35"). It must be a minor version AKS supports under supportPlan (aksgpu/catalog/aks_versions.yaml, AKS's release calendar as of the table's date); one minor past the table's newest is a warning. It must also serve every Kubernetes API aksgpu declares objects of (aksgpu/catalog/kubernetes_apis.yaml: the in-cluster layer's admission policies need 1.30). None: AKS's default version. Upgrades cannot skip a minor version, and AKS refuses downgrades: with upgradeChannel patch pin only "major.minor", with stable or rapid leave it unset."""
    tier: Literal["Free", "Standard", "Premium"] = "Standard"
    """Control plane pricing tier. Free has no uptime SLA and supports up to 1,000 nodes; Standard and Premium up to 5,000; Premium is needed for AKSLongTermSupport."""
    support_plan: Literal["KubernetesOfficial", "AKSLongTermSupport"] = "KubernetesOfficial"
    """KubernetesOfficial: community support window; AKSLongTermSupport: long-term support for the version, which needs tier Premium."""
    upgrade_channel: Literal["rapid", "stable", "patch", "node-image", "none"] = "patch"
    """Cluster auto-upgrade channel: patch keeps the latest patch of the current minor version; stable and rapid also move to newer minor versions; none turns auto-upgrade off. node-image is legacy (a warning): use nodeOsUpgradeChannel; with it AKS fixes nodeOsUpgradeChannel at NodeImage."""
    node_os_upgrade_channel: Literal["None", "Unmanaged", "NodeImage", "SecurityPatch"] = "NodeImage"
    """How node OS updates arrive: NodeImage (AKS rolls new node images), SecurityPatch (AKS applies security patches), Unmanaged (the OS's own patching) or None (no automatic OS updates). Azure Linux does not support SecurityPatch on GPU pools. None and Unmanaged re-image no node, so with security.diskEncryption ephemeral OS disks keep old key versions (a warning)."""
    maintenance_windows: list[MaintenanceWindow] = Field(default_factory=list)
    """Weekly windows for cluster auto-upgrades and node OS updates, at most one per schedule. Empty: no window restricts when they run."""
    api_server: ApiServer = ApiServer()
    """How the API server is reached: public or private endpoint, authorized IP ranges, VNet integration."""
    autoscaler: Autoscaler = Autoscaler()
    """Cluster autoscaler settings (the cluster's autoScalerProfile), shared by every autoscaled pool."""


# --- rules that span fields -----------------------------------------------------------------


def check_control_plane(spec: ClusterSpec) -> Iterator[Issue]:
    cp = spec.control_plane
    if cp.support_plan == "AKSLongTermSupport" and cp.tier != "Premium":
        yield Issue("controlPlane.supportPlan", cp.support_plan, "long-term support needs the Premium tier",
                    "set controlPlane.tier: Premium, or supportPlan: KubernetesOfficial")
    if cp.tier == "Free":
        yield Issue("controlPlane.tier", "Free", "the Free tier has no uptime SLA and fewer API server resources",
                    "use Standard for anything beyond experiments", "warning")
    seen: set[str] = set()
    for index, window in enumerate(cp.maintenance_windows):
        path = f"controlPlane.maintenanceWindows[{index}]"
        if window.schedule in seen:
            yield Issue(f"{path}.schedule", window.schedule, "AKS keeps one window per schedule",
                        "merge the windows of this schedule into one")
        seen.add(window.schedule)
        if spec.fleet is not None:
            continue  # a fleet member's update runs honour its windows (Fleet Manager FAQ), channels off or not
        if window.schedule == "autoUpgrade" and cp.upgrade_channel == "none":
            yield Issue(f"{path}.schedule", window.schedule,
                        "an auto-upgrade window does nothing while upgradeChannel is none",
                        "set controlPlane.upgradeChannel (patch or stable), or drop the window", "warning")
        if window.schedule == "nodeOsUpgrade" and cp.node_os_upgrade_channel in ("None", "Unmanaged"):
            yield Issue(f"{path}.schedule", window.schedule,
                        f"a node OS window does nothing with nodeOsUpgradeChannel {cp.node_os_upgrade_channel}",
                        "set nodeOsUpgradeChannel: NodeImage or SecurityPatch, or drop the window", "warning")
    yield from _check_upgrade_channels(spec)
    yield from _check_kubernetes_version(spec)
    yield from _check_api_server(spec)
    yield from check_autoscaler_profile(spec)


# MicrosoftDocs/azure-aks-docs@fb060abe (read 2026-11-27): auto-upgrade-node-os-image.md (ms.date
# 2026-06-26), "Node OS autoupgrade channel known limitations": with the cluster channel node-image AKS
# sets the node OS channel to NodeImage, and "You can't change the node OS autoupgrade channel value";
# its channel table: SecurityPatch, "Azure Linux doesn't support this channel on GPU-enabled VMs".
# auto-upgrade-cluster.md (ms.date 2026-06-26): node-image "is now legacy and should no longer be used".
NODE_OS_CHANNEL_SOURCE = "AKS docs auto-upgrade-node-os-image.md"


def _check_upgrade_channels(spec: ClusterSpec) -> Iterator[Issue]:
    """Channel pairs AKS documents as invalid, the legacy channel, and customer-key rotation on
    ephemeral OS disks without node image upgrades."""
    cp = spec.control_plane
    path = "controlPlane.nodeOsUpgradeChannel"
    if cp.upgrade_channel == "node-image" and cp.node_os_upgrade_channel != "NodeImage":
        yield Issue(path, cp.node_os_upgrade_channel, "with upgradeChannel node-image AKS sets the node OS channel "
                    f"to NodeImage and refuses any other ({NODE_OS_CHANNEL_SOURCE}, known limitations)",
                    "set upgradeChannel to patch or stable (node-image is legacy), or nodeOsUpgradeChannel: NodeImage")
    elif cp.upgrade_channel == "node-image":
        yield Issue("controlPlane.upgradeChannel", "node-image", "node-image is legacy and 'should no longer be "
                    "used' (AKS docs auto-upgrade-cluster.md): it upgrades node images only, never Kubernetes",
                    "set upgradeChannel: patch (nodeOsUpgradeChannel NodeImage keeps the weekly node images)", "warning")
    # AKS docs upgrade-node-pools.md: "You can't downgrade the control plane or a node pool Kubernetes
    # version"; aksgpu sends kubernetesVersion with every update of the cluster. Azure's own AKS module
    # refuses the same pairs (Azure/terraform-azurerm-aks#281, #302: with patch, no patch number; with
    # stable or rapid, no version), and AKS denies a version that differs from the current one
    # (Azure/azure-cli#31018, 2025-03-31: "orchvers validator will deny the request").
    pinned = cp.kubernetes_version
    if pinned and (cp.upgrade_channel in ("stable", "rapid") or (cp.upgrade_channel == "patch" and pinned.count(".") == 2)):
        moves = "newer minor versions" if cp.upgrade_channel != "patch" else "newer patches"
        yield Issue("controlPlane.kubernetesVersion", pinned, f"upgradeChannel {cp.upgrade_channel} moves the cluster "
                    f"to {moves}, and the next `aksgpu up` would ask AKS to go back to {pinned}, a downgrade AKS "
                    "refuses (AKS docs upgrade-node-pools.md)", "remove kubernetesVersion (the channel chooses), pin "
                    "only the minor version with upgradeChannel patch, or set upgradeChannel: none")
    if cp.node_os_upgrade_channel == "SecurityPatch":
        pools = [pool.name for pool in spec.node_pools if pool.kind == "gpu" and pool.os_sku.startswith("AzureLinux")]
        if pools:
            yield Issue(path, "SecurityPatch", f"Azure Linux does not support SecurityPatch on GPU VMs "
                        f"({NODE_OS_CHANNEL_SOURCE}, channel table), and pools {', '.join(pools)} are Azure Linux GPU pools",
                        "set nodeOsUpgradeChannel: NodeImage, or osSku: Ubuntu on those pools")
    # docs/guides/security.md, security.diskEncryption (AKS docs azure-disk-customer-managed-keys.md,
    # "Gradual usage of new CMK"): a new key version reaches an ephemeral OS disk only when its node
    # is re-imaged, "so never disable or let a version expire while a node may still use it". A fleet
    # member's node images come from the fleet's NodeImage profile, which is why its channel is None.
    if (spec.security.disk_encryption.mode != "none" and cp.node_os_upgrade_channel in ("None", "Unmanaged")
            and spec.fleet is None):
        pools = [pool.name for _, pool in spec.all_pools if pool.os_disk_type != "Managed"]
        if pools:
            yield Issue(path, cp.node_os_upgrade_channel, "with a customer key on the OS disks, a new key version "
                        "reaches an ephemeral OS disk only when its node is re-imaged, and this channel re-images "
                        f"no node: the ephemeral (or AKS-chosen) OS disks of {', '.join(pools)} keep the old "
                        "version, which must never be disabled or expire (AKS docs azure-disk-customer-managed-keys.md)",
                        "set nodeOsUpgradeChannel: NodeImage, or plan node image upgrades after each key rotation",
                        "warning")


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def _check_kubernetes_version(spec: ClusterSpec) -> Iterator[Issue]:
    """The version against AKS's calendar (catalog aks_versions.yaml, as of its `checked` date). One
    minor past the table's newest is a warning: AKS ships a minor about every four months, so a
    real new version may postdate the table; two or more past it is an error (a typo such as 1.40).
    A version AKS supports must also serve every API aksgpu declares for the spec (spec/kubernetes_apis.py);
    one AKS does not support gets that error alone, whose fix (a supported version) is the whole fix."""
    cp = spec.control_plane
    if cp.kubernetes_version is None:
        return
    table = catalog.load("aks_versions")
    checked_on = table["checked"]
    lts = cp.support_plan == "AKSLongTermSupport"
    ends = table["lts" if lts else "community"]
    supported = sorted((v for v, end in ends.items() if end >= checked_on), key=_minor)
    newest = max((_minor(v) for v in [*table["community"], *table["lts"]]))
    asked = _minor(cp.kubernetes_version)
    minor = f"{asked[0]}.{asked[1]}"
    path = "controlPlane.kubernetesVersion"
    listed = ", ".join(supported)
    if minor in supported:
        yield from check_kubernetes_apis(spec)
        return
    if asked[0] == newest[0] and asked[1] == newest[1] + 1:
        yield Issue(path, cp.kubernetes_version, f"is newer than aksgpu's AKS version table (checked {checked_on}, "
                    f"newest {newest[0]}.{newest[1]})", "confirm AKS offers it in the region with `az aks get-versions "
                    f"-l {spec.location}`, or use one of {listed}", "warning")
        yield from check_kubernetes_apis(spec)
        return
    plan = "long-term support" if lts else "community support (supportPlan KubernetesOfficial)"
    if minor in ends:
        why = f"left AKS's {plan} on {ends[minor]}"
    elif asked > newest:
        why = f"is not an AKS version (the newest AKS lists, as of {checked_on}, is {newest[0]}.{newest[1]})"
    else:
        why = f"is not supported by AKS under {plan}"
    fix = f"use one of {listed} (AKS's calendar as of {checked_on})"
    if not lts and minor in table["lts"] and table["lts"][minor] >= checked_on:
        fix += f", or keep {minor} with supportPlan: AKSLongTermSupport and tier: Premium"
    yield Issue(path, cp.kubernetes_version, why, fix)


def _check_api_server(spec: ClusterSpec) -> Iterator[Issue]:
    api = spec.control_plane.api_server
    path = "controlPlane.apiServer"
    ranges = api.authorized_ip_ranges
    if ranges and api.access == "private":
        yield Issue(f"{path}.authorizedIpRanges", ranges, "authorized IP ranges apply only to a public API server",
                    "remove authorizedIpRanges, or set access: public")
    limit = catalog.limit("maxAuthorizedIpRangesVnetIntegration" if api.vnet_integration else "maxAuthorizedIpRanges")
    if len(ranges) > limit:
        yield Issue(f"{path}.authorizedIpRanges", len(ranges), f"AKS takes at most {limit} authorized ranges here",
                    "summarise ranges into larger prefixes")
    if "0.0.0.0/32" in ranges and len(ranges) > 1:
        yield Issue(f"{path}.authorizedIpRanges", ranges,
                    '"0.0.0.0/32" (only the cluster\'s outbound IP) cannot be combined with other ranges',
                    'keep either "0.0.0.0/32" alone or your real ranges')
    for index, text in enumerate(ranges):
        if text == "0.0.0.0/32":
            continue
        try:
            net = ipaddress.IPv4Network(text, strict=False)
        except ValueError:
            yield Issue(f"{path}.authorizedIpRanges[{index}]", text, "must be an IPv4 address or CIDR",
                        'write it like "203.0.113.0/24"')
            continue
        if not net.is_global:
            yield Issue(f"{path}.authorizedIpRanges[{index}]", text,
                        "must be a public IPv4 range (private and reserved ranges never reach a public endpoint)",
                        "use the public egress range of your network")
    if api.access == "public" and not ranges and not api.vnet_integration:
        yield Issue(f"{path}.authorizedIpRanges", [], "the API server is open to the whole internet",
                    "list your egress ranges in authorizedIpRanges, or use access: private", "warning")
    if api.access != "private" and api.private_dns_zone != "system":
        yield Issue(f"{path}.privateDnsZone", api.private_dns_zone, "a private DNS zone is only for access: private",
                    "remove privateDnsZone")
    if api.private_dns_zone not in ("system", "none"):
        # AKS takes only a zone named for the cluster's region (catalog/azure_names.yaml privateDnsZones).
        for issue in check_zone_id(f"{path}.privateDnsZone", api.private_dns_zone,
                                   "Microsoft.ContainerService/managedClusters", spec.location, api.vnet_integration):
            yield replace(issue, rule=f'must be "system", "none" or {issue.rule[len("must be "):]}'
                          if issue.rule.startswith("must be ") else issue.rule,
                          fix=f'{issue.fix}, or use "system" to let AKS manage it')
    vnet_mode = spec.network.vnet.mode
    if api.subnet is not None and not api.vnet_integration:
        yield Issue(f"{path}.subnet", api.subnet, "an API server subnet is only used with vnetIntegration",
                    "set vnetIntegration: true, or remove subnet")
    if api.vnet_integration and vnet_mode != "managed" and api.subnet is None:
        yield Issue(f"{path}.subnet", None,
                    "API server VNet integration in your own VNet needs a delegated subnet of /28 or larger",
                    'add a subnet (e.g. {name: apiserver, cidr: "10.225.0.0/28"}) and name it here')
    if api.vnet_integration and vnet_mode == "managed" and api.subnet is not None:
        yield Issue(f"{path}.subnet", api.subnet, "with an AKS-managed VNet, AKS creates the API server subnet",
                    "remove subnet")
