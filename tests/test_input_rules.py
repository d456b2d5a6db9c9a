"""Input rules where the user writes them (issue 27): classes of values Azure, AKS or Kubernetes
refuse at apply time, or the docs warn about, that `validate` now names with the field, the value,
the rule, its source and the fix. One test per rule, each breaking it."""

from __future__ import annotations

import pytest

from aksgpu import catalog
from aksgpu.components.kubernetes.fabric import NETWORK_OPERATOR_NAMESPACE
from aksgpu.components.kubernetes.objects import GPU_OPERATOR_NAMESPACE, KUEUE_NAMESPACE, SYSTEM_NAMESPACE
from aksgpu.project.stackfile import resolve_stack
from aksgpu.spec import SpecError, parse_cluster_spec
from aksgpu.spec.fleet import parse_fleet_spec
from tests.helpers import REPO, base_spec, edit


def errors_of(spec: dict) -> list:
    with pytest.raises(SpecError) as error:
        parse_cluster_spec(spec)
    return error.value.errors


def warnings_of(spec: dict) -> list:
    return [issue for issue in parse_cluster_spec(spec)[1] if issue.severity == "warning"]


# --- team namespaces that Kubernetes, AKS's add-ons or aksgpu own ----------------------------------


def team(name: str) -> dict:
    spec = edit(base_spec(), "access.teams", [{"name": name}])
    return edit(spec, "nodePools.0.team", name)


RESERVED = catalog.load("reserved_namespaces")


@pytest.mark.parametrize("name", sorted(RESERVED["names"]))
def test_a_team_named_like_a_namespace_someone_else_owns_is_refused(name: str) -> None:
    [issue] = [issue for issue in errors_of(team(name)) if issue.path == "access.teams[0].name"]
    row = RESERVED["names"][name]
    assert issue.value == name and f"would be {name}, which belongs to {row['owner']}" in issue.rule
    assert row["source"] in issue.rule and issue.fix == f'rename the team, e.g. "team-{name}"'


@pytest.mark.parametrize("prefix", sorted(RESERVED["prefixes"]))
def test_a_team_whose_namespace_starts_with_a_reserved_prefix_is_refused(prefix: str) -> None:
    name = f"{prefix}research"
    [issue] = [issue for issue in errors_of(team(name)) if issue.path == "access.teams[0].name"]
    assert f"would start with {prefix}" in issue.rule and RESERVED["prefixes"][prefix]["source"] in issue.rule


def test_a_team_name_that_only_contains_a_reserved_word_is_accepted() -> None:
    parse_cluster_spec(team("my-kube-team"))
    parse_cluster_spec(team("calico"))


def test_every_namespace_aksgpu_declares_itself_is_in_the_reserved_table() -> None:
    own = {SYSTEM_NAMESPACE, GPU_OPERATOR_NAMESPACE, KUEUE_NAMESPACE, NETWORK_OPERATOR_NAMESPACE,
           catalog.load("in_cluster")["draDriver"]["namespace"]}
    listed = {name for name, row in RESERVED["names"].items() if row["owner"].startswith("aksgpu")}
    assert own == listed


# --- tags: Azure's limits, counting the tags aksgpu and Azure Policy add ---------------------------


def tagged(count: int) -> dict:
    return edit(base_spec(), "tags", {f"tag{i}": "x" for i in range(count)})


def test_49_tags_and_aksgpus_own_fit_azures_50() -> None:
    parse_cluster_spec(tagged(49))


def test_50_tags_are_refused_because_aksgpu_adds_its_own() -> None:
    [issue] = errors_of(tagged(50))
    assert issue.path == "tags" and issue.value == 51
    assert "at most 50 tags" in issue.rule and "the 1 aksgpu adds (managed-by)" in issue.rule
    assert "remove 1 tag(s)" in issue.fix


def test_policy_owned_tags_count_towards_the_50() -> None:
    spec = edit(tagged(47), "policyOwnedTags", ["costCenter", "createdOn", "owner"])
    [issue] = errors_of(spec)
    assert issue.value == 51 and "the 3 Azure Policy adds (policyOwnedTags)" in issue.rule


def test_a_tag_that_overrides_aksgpus_own_is_not_counted_twice() -> None:
    parse_cluster_spec(edit(tagged(49), "tags.managed-by", "platform-team"))


@pytest.mark.parametrize(("key", "other"), [("Managed-By", "managed-by"), ("TEAM", "team")])
def test_two_tag_names_that_differ_only_in_case_are_refused(key: str, other: str) -> None:
    spec = edit(base_spec(), "tags", {"team": "ml", key: "x"})
    [issue] = errors_of(spec)
    assert issue.path == f"tags.{key}" and "case-insensitive" in issue.rule and issue.fix.endswith(other)


def test_the_fleets_tags_count_aksgpus_own_too() -> None:
    raw = resolve_stack("training", cwd=REPO / "examples" / "gpu-fleet").fleet
    parse_fleet_spec(edit(raw, "tags", {f"t{i}": "x" for i in range(49)}))
    with pytest.raises(SpecError) as error:
        parse_fleet_spec(edit(raw, "tags", {f"t{i}": "x" for i in range(50)}))
    [issue] = error.value.errors
    assert issue.path == "tags" and issue.value == 51 and "(managed-by)" in issue.rule


def private_registry(spec: dict) -> dict:
    spec = edit(spec, "network.vnet", {"mode": "create", "addressSpace": ["10.224.0.0/12"],
                                       "subnets": [{"name": "nodes", "cidr": "10.224.0.0/16"}]})
    spec = edit(spec, "registry.sku", "Premium")
    return edit(spec, "registry.publicNetworkAccess", False)


def test_the_private_dns_zone_aksgpu_creates_takes_only_15_tags() -> None:
    parse_cluster_spec(private_registry(tagged(14)))
    [issue] = errors_of(private_registry(tagged(15)))
    assert issue.path == "tags" and issue.value == 16 and "at most 15 tags on the private DNS zone" in issue.rule
    assert "registry.privateDnsZoneId" in issue.fix


def test_a_registry_in_a_given_private_dns_zone_keeps_the_50_tag_limit() -> None:
    zone = ("/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/hub/providers/"
            "Microsoft.Network/privateDnsZones/privatelink.azurecr.io")
    parse_cluster_spec(edit(private_registry(tagged(15)), "registry.privateDnsZoneId", zone))


@pytest.mark.parametrize(("key", "value"), [("a" * 513, "x"), ("ok", "v" * 257), ("cost/center", "x"),
                                            ("a<b", "x"), ("", "x")])
def test_tag_names_and_values_follow_azures_rules(key: str, value: str) -> None:
    [issue] = errors_of(edit(base_spec(), "tags", {key: value}))
    assert "tag names are 1-512 characters" in issue.rule and "tag-resources" in issue.rule


# --- upgrade channel pairs AKS documents as invalid -----------------------------------------------


def channels(upgrade: str, node_os: str) -> dict:
    spec = edit(base_spec(), "controlPlane.upgradeChannel", upgrade)
    return edit(spec, "controlPlane.nodeOsUpgradeChannel", node_os)


@pytest.mark.parametrize("node_os", ["None", "Unmanaged", "SecurityPatch"])
def test_upgrade_channel_node_image_needs_node_os_channel_node_image(node_os: str) -> None:
    [issue] = errors_of(channels("node-image", node_os))
    assert issue.path == "controlPlane.nodeOsUpgradeChannel" and issue.value == node_os
    assert "auto-upgrade-node-os-image.md" in issue.rule and "nodeOsUpgradeChannel: NodeImage" in issue.fix


def test_upgrade_channel_node_image_with_node_image_is_only_warned_as_legacy() -> None:
    [warning] = [w for w in warnings_of(channels("node-image", "NodeImage")) if w.path.startswith("controlPlane")]
    assert warning.path == "controlPlane.upgradeChannel" and "legacy" in warning.rule


def test_security_patch_is_refused_with_azure_linux_gpu_pools() -> None:
    spec = edit(channels("patch", "SecurityPatch"), "nodePools.0.osSku", "AzureLinux")
    [issue] = errors_of(spec)
    assert issue.path == "controlPlane.nodeOsUpgradeChannel" and "a100" in issue.rule
    assert "Azure Linux does not support SecurityPatch on GPU VMs" in issue.rule
    parse_cluster_spec(channels("patch", "SecurityPatch"))  # Ubuntu GPU pools take it


# --- risky settings the docs warn about -------------------------------------------------------------


def customer_key_disks(node_os: str) -> dict:
    spec = edit(base_spec(), "security.kms", {"mode": "create", "networkAccess": "Public"})
    spec = edit(spec, "security.diskEncryption", {"mode": "create"})
    spec = edit(spec, "nodePools.0.osDiskType", "Managed")
    spec = edit(spec, "systemPool.osDiskType", "Ephemeral")
    return edit(spec, "controlPlane.nodeOsUpgradeChannel", node_os)


@pytest.mark.parametrize("node_os", ["None", "Unmanaged"])
def test_customer_key_on_ephemeral_os_disks_without_node_image_upgrades_is_warned(node_os: str) -> None:
    [warning] = [w for w in warnings_of(customer_key_disks(node_os)) if w.path == "controlPlane.nodeOsUpgradeChannel"]
    assert "re-images no node" in warning.rule and "system" in warning.rule and "a100" not in warning.rule
    assert "azure-disk-customer-managed-keys.md" in warning.rule


def test_customer_key_with_node_image_upgrades_is_not_warned() -> None:
    assert not [w for w in warnings_of(customer_key_disks("NodeImage")) if w.path.startswith("controlPlane.nodeOs")]


# --- an ephemeral OS disk on a size without a local disk --------------------------------------------


@pytest.mark.parametrize("size", ["Standard_D4s_v5", "Standard_D8s_v5", "Standard_D16s_v5"])
def test_an_ephemeral_os_disk_on_a_size_without_a_local_disk_is_an_error(size: str) -> None:
    spec = edit(base_spec(), "nodePools.1", {"name": "cpu", "kind": "cpu", "vmSize": size, "minCount": 0,
                                             "maxCount": 2, "osDiskType": "Ephemeral"})
    [issue] = errors_of(spec)
    assert issue.path == "nodePools[1].osDiskType" and issue.value == "Ephemeral"
    assert "has no local disk" in issue.rule and "ephemeral-os-disks.md" in issue.rule
    assert "osDiskType: Managed" in issue.fix
    parse_cluster_spec(edit(spec, "nodePools.1.osDiskType", "Managed"))


def test_a_size_with_only_nvme_disks_still_takes_an_ephemeral_os_disk() -> None:
    spec = edit(base_spec(), "nodePools.1", {"name": "cpu", "kind": "cpu", "vmSize": "Standard_D16ds_v6",
                                             "minCount": 0, "maxCount": 2, "osDiskType": "Ephemeral"})
    parse_cluster_spec(spec)


def test_a_fleet_member_whose_node_images_the_fleet_rolls_is_not_warned() -> None:
    spec = edit(customer_key_disks("None"), "fleet", {"stack": "training", "member": "eastus2", "group": "canary"})
    spec = edit(spec, "registry", {"mode": "none"})
    assert not [w for w in warnings_of(spec) if w.path == "controlPlane.nodeOsUpgradeChannel"]


@pytest.mark.parametrize(("channel", "version"), [("stable", "1.34"), ("rapid", "1.34"), ("patch", "1.34.2")])
def test_a_pinned_version_that_the_upgrade_channel_moves_past_is_refused(channel: str, version: str) -> None:
    spec = edit(base_spec(), "controlPlane.upgradeChannel", channel)
    [issue] = errors_of(edit(spec, "controlPlane.kubernetesVersion", version))
    assert issue.path == "controlPlane.kubernetesVersion" and "a downgrade AKS refuses" in issue.rule
    assert "upgrade-node-pools.md" in issue.rule


@pytest.mark.parametrize(("channel", "version"), [("patch", "1.34"), ("none", "1.34.2")])
def test_a_pin_the_channel_keeps_is_accepted(channel: str, version: str) -> None:
    spec = edit(base_spec(), "controlPlane.upgradeChannel", channel)
    parse_cluster_spec(edit(spec, "controlPlane.kubernetesVersion", version))
