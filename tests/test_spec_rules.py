"""Every spec rule rejects what AKS would reject (or warns on legal but risky choices), before
Azure is called, with a message naming the field, the value, the rule and a fix."""

from __future__ import annotations

import re

import pytest

from aksgpu.spec import SpecError, parse_cluster_spec
from tests.helpers import REMOVE, SUBSCRIPTION, base_spec, edit

GPU_POOL = "nodePools.0"
CAPACITY_RESERVATION = (f"{SUBSCRIPTION}/resourceGroups/capacity/providers/Microsoft.Compute/"
                        "capacityReservationGroups/h100")
SUBNETS_CREATE = {
    "mode": "create",
    "addressSpace": ["10.224.0.0/12"],
    "subnets": [{"name": "nodes", "cidr": "10.224.0.0/16"}, {"name": "api", "cidr": "10.225.0.0/28"}],
}

# (id, edits [(path, value)], expected path, fragment of the rule)
ERRORS = [
    ("size missing its _v4", [(f"{GPU_POOL}.vmSize", "Standard_NC24ads_A100")], f"{GPU_POOL}.vmSize",
     "is not in aksgpu's VM size table"),
    ("unknown system size", [("systemPool.vmSize", "Standard_D16pds_v6")], "systemPool.vmSize",
     "is not in aksgpu's VM size table"),
    ("unknown cpu size", [("nodePools.1", {"name": "cpu", "vmSize": "Standard_D16pds_v6", "count": 1})],
     "nodePools[1].vmSize", "a typo, a retired size"),
    ("cluster name", [("name", "gpu_dev!")], "name", "letters, digits, '-' or '_'"),
    ("location", [("location", "East US")], "location", "Azure region name"),
    ("kubelet on the temp disk, OS disk left to AKS", [(f"{GPU_POOL}.kubeletDisk", "Temporary")],
     f"{GPU_POOL}.kubeletDisk", "with osDiskType unset"),
    ("region one edit away", [("location", "eastus22")], "location", "close to one"),
    ("size not a size name", [(f"{GPU_POOL}.vmSize", "ND96isr_H100_v5")], f"{GPU_POOL}.vmSize",
     "not an Azure VM size name"),
    ("B-series system pool in the table", [("systemPool.vmSize", "Standard_B4ms")], "systemPool.vmSize",
     "B-series sizes are not supported"),
    ("B-series system pool not in the table", [("systemPool.vmSize", "Standard_B8als_v2")], "systemPool.vmSize",
     "B-series sizes are not supported"),
    ("1-vCPU system pool not in the table", [("systemPool.vmSize", "Standard_F1s")], "systemPool.vmSize",
     "the name says 1 vCPU"),
    ("derived workspace name", [("name", "gpu_prod")], "name", "Log Analytics workspace name aksgpu derives"),
    ("derived vnet name", [("name", "g" * 60), ("monitoring.logAnalytics.name", "logs"),
                           ("network.vnet", SUBNETS_CREATE)], "name", "virtual network name aksgpu derives"),
    ("derived node resource group", [("resourceGroup.name", "r" + "." * 85 + "x")], "resourceGroup.name",
     "node resource group name aksgpu derives"),
    ("derived monitor workspace", [("name", "gpu_prod"), ("monitoring.logAnalytics.name", "logs"),
                                   ("monitoring.managedPrometheus", True)], "name", "Azure Monitor workspace name"),
    ("unknown key", [("nodePoolz", [])], "nodePoolz", "is not a field"),
    ("enum", [("controlPlane.tier", "Basic")], "controlPlane.tier", "must be one of"),
    ("missing", [("resourceGroup", REMOVE)], "resourceGroup", "is required"),
    ("type", [("systemPool.count", "three")], "systemPool.count", "valid integer"),
    ("pool name pattern", [(f"{GPU_POOL}.name", "GPU-A100")], f"{GPU_POOL}.name", "1-12 lowercase"),
    ("pool name unique", [("nodePools.1", {"name": "system", "vmSize": "Standard_D8ds_v5", "count": 1})],
     "nodePools[1].name", "already uses"),
    ("perZone name length", [(f"{GPU_POOL}.name", "a100longname"), (f"{GPU_POOL}.perZone", True)],
     f"{GPU_POOL}.name", "at most 12 characters"),
    ("spot system pool", [("systemPool.priority", "spot")], "systemPool.priority", "is not a field"),
    ("system count >= 1", [("systemPool.count", 0)], "systemPool.count", "at least 1"),
    ("system min >= 1", [("systemPool.count", REMOVE), ("systemPool.minCount", 0), ("systemPool.maxCount", 3)],
     "systemPool.minCount", "at least 1"),
    ("autoscale needs both", [(f"{GPU_POOL}.maxCount", REMOVE)], f"{GPU_POOL}.minCount", "both minCount and maxCount"),
    ("min <= max", [(f"{GPU_POOL}.minCount", 5)], f"{GPU_POOL}.minCount", "at most maxCount"),
    ("count in range", [(f"{GPU_POOL}.count", 9)], f"{GPU_POOL}.count", "between minCount"),
    ("max <= 1000", [(f"{GPU_POOL}.maxCount", 1001)], f"{GPU_POOL}.maxCount", "at most 1000"),
    ("pool needs size", [(f"{GPU_POOL}.minCount", REMOVE), (f"{GPU_POOL}.maxCount", REMOVE)],
     f"{GPU_POOL}.count", "needs a size"),
    ("maxPods range", [(f"{GPU_POOL}.maxPods", 300)], f"{GPU_POOL}.maxPods", "at most 250"),
    ("maxPods x nodes", [(f"{GPU_POOL}.maxPods", 10), (f"{GPU_POOL}.maxCount", 2)], f"{GPU_POOL}.maxPods",
     "room for 30 pods"),
    ("system B-series", [("systemPool.vmSize", "Standard_B4ms"), ("systemPool.osDiskType", "Managed")],
     "systemPool.vmSize", "B-series"),
    ("system GPU size", [("systemPool.vmSize", "Standard_NC24ads_A100_v4"), ("systemPool.osDiskType", "Managed")],
     "systemPool.vmSize", "not GPU work"),
    # NC24ads_A100_v4 places the OS disk on its 256 GiB cache disk (Resource SKUs API).
    ("ephemeral needs cache disk", [(f"{GPU_POOL}.osDiskType", "Ephemeral"), (f"{GPU_POOL}.osDiskSizeGb", 300)],
     f"{GPU_POOL}.osDiskType", "places it on its cache disk, 256 GiB"),
    ("ephemeral needs temp disk", [("systemPool.vmSize", "Standard_D4ds_v5"), ("systemPool.osDiskSizeGb", 200)],
     "systemPool.osDiskType", "places it on its temp disk, 150 GiB"),
    ("ephemeral needs NVMe disk", [("systemPool.vmSize", "Standard_D2ds_v6"), ("systemPool.osDiskSizeGb", 128)],
     "systemPool.osDiskType", "places it on its NVMe disks, 110 GiB"),
    ("MIG profile of the GPU", [(f"{GPU_POOL}.vmSize", "Standard_NV6ads_A10_v5"),
                                (f"{GPU_POOL}.gpu", {"migProfile": "MIG1g"})], f"{GPU_POOL}.gpu.migProfile",
     "has part of A10"),
    ("kubelet temp needs space", [("systemPool.vmSize", "Standard_D4s_v5"), ("systemPool.osDiskType", "Managed"),
                                  ("systemPool.kubeletDisk", "Temporary")], "systemPool.kubeletDisk", "no temp disk"),
    ("gpu kind needs gpu size", [(f"{GPU_POOL}.vmSize", "Standard_D8ds_v5")], f"{GPU_POOL}.vmSize",
     "needs a GPU VM size"),
    ("cpu kind on gpu size", [(f"{GPU_POOL}.kind", "cpu")], f"{GPU_POOL}.kind", "has 1 GPU"),
    ("gpu settings need gpu kind", [(f"{GPU_POOL}.kind", "cpu"), (f"{GPU_POOL}.vmSize", "Standard_D8ds_v5"),
                                    (f"{GPU_POOL}.gpu", {"driver": "None"})], f"{GPU_POOL}.gpu", "need kind: gpu"),
    ("MIG needs capable size", [(f"{GPU_POOL}.vmSize", "Standard_NC4as_T4_v3"),
                                (f"{GPU_POOL}.gpu", {"migProfile": "MIG1g"})], f"{GPU_POOL}.gpu.migProfile",
     "MIG needs an A100"),
    ("MIG profile enum", [(f"{GPU_POOL}.gpu", {"migProfile": "MIG5g"})], f"{GPU_POOL}.gpu.migProfile", "one of"),
    ("AMD needs driver None", [(f"{GPU_POOL}.vmSize", "Standard_ND96isr_MI300X_v5")], f"{GPU_POOL}.gpu.driver",
     "no AMD GPU driver"),
    ("capacity reservation id", [(f"{GPU_POOL}.capacityReservationGroupId", "capacity-h100")],
     f"{GPU_POOL}.capacityReservationGroupId", "resource ID of a capacity reservation group"),
    ("capacity reservation on spot", [(f"{GPU_POOL}.priority", "spot"),
                                      (f"{GPU_POOL}.capacityReservationGroupId", CAPACITY_RESERVATION)],
     f"{GPU_POOL}.capacityReservationGroupId", "spot VMs cannot use them"),
    ("proximity group across zones", [(f"{GPU_POOL}.zones", ["1", "2"]),
                                      (f"{GPU_POOL}.proximityPlacementGroupId",
                                       f"{SUBSCRIPTION}/resourceGroups/net/providers/Microsoft.Compute/"
                                       "proximityPlacementGroups/ppg1")],
     f"{GPU_POOL}.proximityPlacementGroupId", "spans at most one zone"),
    ("size in no zone of the region", [("location", "southcentralus"), (f"{GPU_POOL}.vmSize", "Standard_NC6s_v3"),
                                       (f"{GPU_POOL}.zones", ["1"])], f"{GPU_POOL}.zones", "in no availability zone"),
    ("pod subnet capacity", [("network.plugin", "azure"), ("network.vnet", {
        "mode": "create", "podSubnet": "pods",
        "subnets": [{"name": "nodes", "cidr": "10.224.0.0/16"}, {"name": "pods", "cidr": "10.225.0.0/24"}]})],
     "network.vnet.subnets[1].cidr", "(pods) can need"),
    ("retired size", [(f"{GPU_POOL}.vmSize", "Standard_NC6s_v3")], f"{GPU_POOL}.vmSize",
     'retired on 2025-09-30'),
    ("spot settings need spot", [(f"{GPU_POOL}.spot", {"maxPrice": -1})], f"{GPU_POOL}.spot", "need priority: spot"),
    ("spot price", [(f"{GPU_POOL}.priority", "spot"), (f"{GPU_POOL}.spot", {"maxPrice": 0})],
     f"{GPU_POOL}.spot.maxPrice", "-1"),
    ("spot price not a number", [(f"{GPU_POOL}.priority", "spot"), (f"{GPU_POOL}.spot", {"maxPrice": float("nan")})],
     f"{GPU_POOL}.spot.maxPrice", "-1"),
    ("spot price infinite", [(f"{GPU_POOL}.priority", "spot"), (f"{GPU_POOL}.spot", {"maxPrice": float("inf")})],
     f"{GPU_POOL}.spot.maxPrice", "-1"),
    ("spot price decimals", [(f"{GPU_POOL}.priority", "spot"), (f"{GPU_POOL}.spot", {"maxPrice": 0.1234567})],
     f"{GPU_POOL}.spot.maxPrice", "5 decimal places"),
    ("spot eviction enum", [(f"{GPU_POOL}.priority", "spot"), (f"{GPU_POOL}.spot", {"evictionPolicy": "Stop"})],
     f"{GPU_POOL}.spot.evictionPolicy", "one of"),
    ("spot no surge", [(f"{GPU_POOL}.priority", "spot"), (f"{GPU_POOL}.upgrade", {"maxSurge": "1"})],
     f"{GPU_POOL}.upgrade.maxSurge", "no surge"),
    ("taint syntax", [(f"{GPU_POOL}.taints", ["dedicated:NoSchedule"])], f"{GPU_POOL}.taints[0]", "key=value:Effect"),
    ("spot taint declared", [(f"{GPU_POOL}.taints", ["kubernetes.azure.com/scalesetpriority=spot:NoSchedule"])],
     f"{GPU_POOL}.taints[0]", "declares the spot taint on spot pools itself"),
    ("label name", [(f"{GPU_POOL}.labels", {"-bad": "x"})], f"{GPU_POOL}.labels.-bad", "label names"),
    ("label value", [(f"{GPU_POOL}.labels", {"tier": "a b"})], f"{GPU_POOL}.labels.tier", "label values"),
    ("reserved label prefix", [(f"{GPU_POOL}.labels", {"kubernetes.azure.com/mode": "x"})],
     f"{GPU_POOL}.labels.kubernetes.azure.com/mode", "reserved for AKS"),
    ("team must be declared", [(f"{GPU_POOL}.team", "ml")], f"{GPU_POOL}.team", "declared in access.teams"),
    ("zones enum", [(f"{GPU_POOL}.zones", ["4"])], f"{GPU_POOL}.zones[0]", "one of"),
    ("too many pools",
     [("nodePools", [{"name": f"p{i}", "vmSize": "Standard_D8ds_v5", "count": 1} for i in range(100)])],
     "nodePools", "at most 100 node pools"),
    ("too many nodes",
     [("nodePools", [{"name": f"p{i}", "vmSize": "Standard_D8ds_v5", "count": 1000} for i in range(6)])],
     "nodePools", "at most 5000 nodes"),
    ("free tier over 1000 nodes", [("controlPlane.tier", "Free"),
                                   ("nodePools", [{"name": f"p{i}", "vmSize": "Standard_D8ds_v5", "count": 600}
                                                  for i in range(2)])], "controlPlane.tier", "up to 1000 nodes"),
    ("LTS needs Premium", [("controlPlane.supportPlan", "AKSLongTermSupport")], "controlPlane.supportPlan",
     "Premium tier"),
    ("k8s version", [("controlPlane.kubernetesVersion", "v1.33")], "controlPlane.kubernetesVersion",
     "major.minor"),
    ("maintenance duration", [("controlPlane.maintenanceWindows", [{"schedule": "autoUpgrade", "durationHours": 2}])],
     "controlPlane.maintenanceWindows[0].durationHours", "at least 4"),
    ("maintenance start", [("controlPlane.maintenanceWindows", [{"schedule": "autoUpgrade", "startTime": "25:00"}])],
     "controlPlane.maintenanceWindows[0].startTime", "HH:MM"),
    ("one window per schedule", [("controlPlane.maintenanceWindows", [{"schedule": "autoUpgrade"},
                                                                       {"schedule": "autoUpgrade"}])],
     "controlPlane.maintenanceWindows[1].schedule", "one window per schedule"),
    ("authorized ranges private", [("controlPlane.apiServer.access", "private")],
     "controlPlane.apiServer.authorizedIpRanges", "only to a public API server"),
    ("authorized ranges public only", [("controlPlane.apiServer.authorizedIpRanges", ["10.0.0.0/8"])],
     "controlPlane.apiServer.authorizedIpRanges[0]", "public IPv4"),
    ("authorized range syntax", [("controlPlane.apiServer.authorizedIpRanges", ["2001:db8::/32"])],
     "controlPlane.apiServer.authorizedIpRanges[0]", "IPv4 address or CIDR"),
    ("0.0.0.0/32 alone", [("controlPlane.apiServer.authorizedIpRanges", ["0.0.0.0/32", "20.30.40.0/24"])],
     "controlPlane.apiServer.authorizedIpRanges", "cannot be combined"),
    ("vnet integration subnet", [("network.vnet", SUBNETS_CREATE), ("controlPlane.apiServer.vnetIntegration", True)],
     "controlPlane.apiServer.subnet", "delegated subnet"),
    ("api subnet size", [("network.vnet", edit(SUBNETS_CREATE, "subnets.1.cidr", "10.225.0.0/29")),
                         ("controlPlane.apiServer.vnetIntegration", True), ("controlPlane.apiServer.subnet", "api")],
     "network.vnet.subnets[1].cidr", "/28 or larger"),
    ("private dns zone on public", [("controlPlane.apiServer.privateDnsZone", "none")],
     "controlPlane.apiServer.privateDnsZone", "only for access: private"),
    ("pod cidr with azure", [("network.plugin", "azure"), ("network.podCidr", "10.244.0.0/16")], "network.podCidr",
     "only used by kubenet and azure-overlay"),
    ("cilium policy needs dataplane", [("network.policy", "cilium")], "network.policy", "cilium dataplane"),
    ("cilium needs azure cni", [("network.plugin", "kubenet"), ("network.dataplane", "cilium")],
     "network.dataplane", "needs Azure CNI"),
    ("kubenet with azure policy", [("network.plugin", "kubenet"), ("network.policy", "azure")], "network.policy",
     "needs Azure CNI"),
    ("service cidr size", [("network.serviceCidr", "10.0.0.0/12"), ("network.dnsServiceIp", "10.0.0.10")],
     "network.serviceCidr", "smaller than a /12"),
    ("dns ip in service cidr", [("network.dnsServiceIp", "10.1.0.10")], "network.dnsServiceIp",
     "inside the service CIDR"),
    ("dns ip not .1", [("network.dnsServiceIp", "10.0.0.1")], "network.dnsServiceIp", "first address"),
    ("cidr syntax", [("network.serviceCidr", "10.0.0.1/16")], "network.serviceCidr", "no host bits"),
    ("ranges overlap", [("network.podCidr", "10.0.0.0/16")], "network.podCidr", "overlaps network.serviceCidr"),
    ("reserved range", [("network.podCidr", "172.30.0.0/16")], "network.podCidr", "AKS reserves"),
    ("pod cidr capacity", [("network.podCidr", "10.244.0.0/24")], "network.podCidr", "fits 1 nodes"),
    ("subnet outside vnet", [("network.vnet", edit(SUBNETS_CREATE, "subnets.0.cidr", "10.100.0.0/16"))],
     "network.vnet.subnets[0].cidr", "inside the VNet"),
    ("subnets overlap", [("network.vnet", edit(SUBNETS_CREATE, "subnets.1.cidr", "10.224.0.0/28"))],
     "network.vnet.subnets[1].cidr", "overlaps subnet nodes"),
    ("unknown subnet", [("network.vnet", SUBNETS_CREATE), (f"{GPU_POOL}.subnet", "gpu")], f"{GPU_POOL}.subnet",
     "must name a subnet"),
    ("subnet in managed vnet", [(f"{GPU_POOL}.subnet", "gpu")], f"{GPU_POOL}.subnet", "AKS-managed VNet"),
    ("subnet capacity", [("network.plugin", "azure"),
                         ("network.vnet", edit(SUBNETS_CREATE, "subnets.0.cidr", "10.224.0.0/24"))],
     "network.vnet.subnets[0].cidr", "addresses at full scale"),
    ("existing subnet id", [("network.vnet", {"mode": "existing", "subnets": [{"name": "nodes", "id": "nodes"}]})],
     "network.vnet.subnets[0].id", "resource ID of a subnet"),
    ("managed NAT needs managed vnet", [("network.vnet", SUBNETS_CREATE), ("network.outbound", "managedNATGateway")],
     "network.outbound", "AKS-managed VNet"),
    ("user NAT needs own vnet", [("network.outbound", "userAssignedNATGateway")], "network.outbound",
     "your own node subnets"),
    ("azure rbac needs aad", [("access.authorization", "azure-rbac"), ("access.aad.enabled", False),
                              ("access.localAccounts", True)], "access.authorization", "needs Entra ID"),
    ("local accounts off needs aad", [("access.aad.enabled", False)], "access.localAccounts", "nobody could sign in"),
    ("workload identity needs oidc", [("access.oidcIssuer", False)], "access.workloadIdentity", "OIDC issuer"),
    ("group id is guid", [("access.aad.adminGroupObjectIds", ["platform-admins"])],
     "access.aad.adminGroupObjectIds[0]", "GUID"),
    ("registry name", [("registry.name", "my-acr")], "registry.name", "5-50 letters and digits"),
    ("zone redundancy needs premium", [("registry.sku", "Standard")], "registry.zoneRedundancy", "Premium"),
    ("existing registry id", [("registry.mode", "existing")], "registry.id", "existing container registry"),
    ("log category", [("monitoring.controlPlaneLogs", ["kube-everything"])], "monitoring.controlPlaneLogs[0]",
     "not an AKS resource-log category"),
    ("insights need workspace", [("monitoring.logAnalytics", {"mode": "none"}), ("monitoring.controlPlaneLogs", [])],
     "monitoring.containerInsights", "Log Analytics workspace"),
    ("retention", [("monitoring.logAnalytics", {"retentionDays": 7})], "monitoring.logAnalytics.retentionDays",
     "at least 30"),
]

WARNINGS = [
    ("capacity reservation needs the identity's role",
     [(f"{GPU_POOL}.capacityReservationGroupId", CAPACITY_RESERVATION)],
     f"{GPU_POOL}.capacityReservationGroupId", "holds Contributor on its resource group (capacity)"),
    ("size not sold in the region", [("location", "norwayeast")], f"{GPU_POOL}.vmSize",
     "no price for this size in norwayeast"),
    ("size not in the zone on the sampled subscription", [("location", "southcentralus"),
                                                          (f"{GPU_POOL}.zones", ["2"])],
     f"{GPU_POOL}.zones", "offered only in zones 1, 3 of southcentralus"),
    ("ephemeral placement unknown", [(f"{GPU_POOL}.vmSize", "Standard_NC48ads_A100_v4"),
                                     (f"{GPU_POOL}.osDiskType", "Ephemeral"), (f"{GPU_POOL}.osDiskSizeGb", 200)],
     f"{GPU_POOL}.osDiskType", "does not say whether Azure places it on a cache disk"),
    ("large cluster, small system pool", [(f"{GPU_POOL}.maxCount", 600), ("controlPlane.tier", "Standard"),
                                          ("network.podCidr", "10.240.0.0/12")],
     "systemPool.vmSize", "AKS's guidance for 500 nodes"),
    ("kubenet retiring", [("network.plugin", "kubenet")], "network.plugin", "stops supporting kubenet"),
    ("single-zone system pool", [("systemPool.zones", ["1"])], "systemPool.zones", "fewer than two zones"),
    ("spot without fallback", [(f"{GPU_POOL}.priority", "spot")], f"{GPU_POOL}.priority", "no on-demand"),
    ("open API server", [("controlPlane.apiServer.authorizedIpRanges", [])],
     "controlPlane.apiServer.authorizedIpRanges", "whole internet"),
    ("unknown size said new", [(f"{GPU_POOL}.vmSize", "Standard_ND96isr_GB300_v6"),
                               (f"{GPU_POOL}.vmSizeNotInCatalog", True)], f"{GPU_POOL}.vmSize",
     "not in aksgpu's VM size table (vmSizeNotInCatalog: true)"),
    ("unknown system size said new", [("systemPool.vmSize", "Standard_D16pds_v6"),
                                      ("systemPool.vmSizeNotInCatalog", True)], "systemPool.vmSize",
     "these checks did not run: memory, GPUs and local temp disk"),
    ("unknown cpu size said new", [("nodePools.1", {"name": "cpu", "vmSize": "Standard_D16pds_v6", "count": 1,
                                                    "vmSizeNotInCatalog": True})],
     "nodePools[1].vmSize", "these checks did not run: whether it has GPUs"),
    ("a listed size said new", [(f"{GPU_POOL}.vmSizeNotInCatalog", True)], f"{GPU_POOL}.vmSizeNotInCatalog",
     "is in aksgpu's VM size table"),
    ("small autoscaled system pool", [("systemPool.count", REMOVE), ("systemPool.minCount", 1),
                                      ("systemPool.maxCount", 3)], "systemPool.minCount", "at least two"),
    ("Azure Linux GPU pool", [(f"{GPU_POOL}.osSku", "AzureLinux")], f"{GPU_POOL}.osSku", "no automatic security"),
    ("pool at the AKS maximum", [(f"{GPU_POOL}.maxCount", 1000), ("controlPlane.tier", "Standard"),
                                 ("network.podCidr", "10.240.0.0/12")],
     f"{GPU_POOL}.maxCount", "most nodes per pool"),
    ("feature-switch tag", [("tags", {"skipGPUDriverInstall": "true"})], "tags.skipGPUDriverInstall",
     "feature switch"),
    ("region not in the table", [("location", "marsnorth")], "location", "not in aksgpu's table of Azure"),
    ("NPM at scale", [("network.policy", "azure"), (f"{GPU_POOL}.maxCount", 300), ("network.podCidr", "10.240.0.0/12")],
     "network.policy", "up to 250 nodes"),
    ("no admin group", [("access.aad.adminGroupObjectIds", [])], "access.aad.adminGroupObjectIds", "cluster admin"),
    ("small system pool", [("systemPool.count", 1)], "systemPool.count", "at least two"),
]


def _message_path(path: str) -> str:
    """Edit paths ('nodePools.0.name') in message form ('nodePools[0].name')."""
    return re.sub(r"\.(\d+)", r"[\1]", path)


def _apply(edits: list) -> dict:
    spec = base_spec()
    for path, value in edits:
        spec = edit(spec, path, value)
    return spec


def test_base_spec_is_valid_without_warnings() -> None:
    spec, warnings = parse_cluster_spec(base_spec())
    assert spec.name == "gpu-test"
    # The base spec keeps AKS's default network.policy none, under which the NetworkPolicies aksgpu
    # declares are not enforced: that one warning, nothing else.
    assert [w.path for w in warnings] == ["network.policy"]


@pytest.mark.parametrize(("edits", "path", "fragment"), [case[1:] for case in ERRORS], ids=[c[0] for c in ERRORS])
def test_error(edits: list, path: str, fragment: str) -> None:
    path = _message_path(path)
    with pytest.raises(SpecError) as raised:
        parse_cluster_spec(_apply(edits))
    matches = [i for i in raised.value.errors if i.path == path and fragment in i.rule]
    assert matches, f"no error at {path} with {fragment!r}; got:\n{raised.value}"
    issue = matches[0]
    assert issue.fix, "every error says how to fix it"
    assert str(issue).startswith(f"{path} = ") and "Fix: " in str(issue)


@pytest.mark.parametrize(("edits", "path", "fragment"), [case[1:] for case in WARNINGS], ids=[c[0] for c in WARNINGS])
def test_warning(edits: list, path: str, fragment: str) -> None:
    path = _message_path(path)
    _, warnings = parse_cluster_spec(_apply(edits))
    assert any(w.path == path and fragment in w.rule and w.severity == "warning" for w in warnings), warnings


def test_all_errors_are_reported_at_once() -> None:
    spec = _apply([("name", "bad name"), ("controlPlane.tier", "Gold"), (f"{GPU_POOL}.name", "BAD")])
    with pytest.raises(SpecError) as raised:
        parse_cluster_spec(spec)
    assert {i.path for i in raised.value.errors} >= {"name", "controlPlane.tier", "nodePools[0].name"}
    assert "has 3 problems" in str(raised.value)


def test_unknown_key_suggests_the_close_field() -> None:
    with pytest.raises(SpecError) as raised:
        parse_cluster_spec(_apply([("systemPool.vmsize", "Standard_D8ds_v5")]))
    assert 'did you mean "vmSize"' in raised.value.errors[0].fix


def test_spec_that_is_not_a_mapping() -> None:
    with pytest.raises(SpecError) as raised:
        parse_cluster_spec(["not", "a", "mapping"])
    assert "must be a mapping" in str(raised.value)


def test_a_value_nested_too_deeply_is_reported_not_a_recursion_error() -> None:
    # The Pulumi program reads config the engine parsed, not aksgpu's YAML reader with its depth limit.
    deep: object = "x"
    for _ in range(3000):
        deep = [deep]
    with pytest.raises(SpecError) as raised:
        parse_cluster_spec(edit(base_spec(), "tags", deep))
    assert "tags = (a value nested too deeply to show): input should be a valid dictionary" in str(raised.value)


def test_a_size_missing_from_the_table_names_the_close_one_and_the_opt_out() -> None:
    with pytest.raises(SpecError) as raised:
        parse_cluster_spec(_apply([(f"{GPU_POOL}.vmSize", "Standard_NC24ads_A100")]))
    issue = next(i for i in raised.value.errors if i.path == _message_path(f"{GPU_POOL}.vmSize"))
    assert issue.severity == "error" and 'did you mean "Standard_NC24ads_A100_v4"' in issue.fix
    assert "vmSizeNotInCatalog: true" in issue.fix


@pytest.mark.parametrize("version", ["1.29", "1.33.2", "1.40", "2.0"])
def test_a_kubernetes_version_aks_does_not_support_is_an_error_listing_the_supported(version: str) -> None:
    """Format alone passed 1.29 and 1.40 (issue 26); the calendar (catalog aks_versions.yaml) holds them."""
    with pytest.raises(SpecError) as raised:
        parse_cluster_spec(_apply([("controlPlane.kubernetesVersion", version),
                                   ("controlPlane.upgradeChannel", "none")]))
    [issue] = [i for i in raised.value.errors if i.path == "controlPlane.kubernetesVersion"]
    assert issue.value == version and "1.35" in issue.fix and "2026-11-27" in issue.fix
    if version.startswith("1.33"):
        assert "left AKS's community support" in issue.rule and "2026-07-31" in issue.rule
        assert "AKSLongTermSupport" in issue.fix


def test_a_version_in_long_term_support_passes_on_that_plan_and_one_past_the_table_warns() -> None:
    lts = [("controlPlane.kubernetesVersion", "1.33"), ("controlPlane.supportPlan", "AKSLongTermSupport"),
           ("controlPlane.tier", "Premium")]
    _, warnings = parse_cluster_spec(_apply(lts))
    assert not [w for w in warnings if w.path == "controlPlane.kubernetesVersion"]
    _, warnings = parse_cluster_spec(_apply([("controlPlane.kubernetesVersion", "1.38")]))
    [warning] = [w for w in warnings if w.path == "controlPlane.kubernetesVersion"]
    assert "newer than aksgpu's AKS version table (checked 2026-11-27" in warning.rule
