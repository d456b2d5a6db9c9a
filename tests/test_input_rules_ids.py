"""Input rules where the user writes them: the resource IDs a spec takes (spec/resource_ids.py) and
the Azure names it lets the user set (spec/names.py check_name), each broken with hostile values.
Every problem is one Issue at the field, naming the value, the rule and the fix."""

from __future__ import annotations

from typing import Any

import pytest

from aksgpu.spec import SpecError, parse_cluster_spec
from aksgpu.spec.fleet import parse_fleet_spec
from aksgpu.spec.resource_ids import ResourceId, parse, parse_key_id
from tests.helpers import REMOVE, SUBSCRIPTION, base_spec, edit
from tests.test_fleet import _shared_raw

GUID = SUBSCRIPTION.rsplit("/", 1)[-1]
KEY_VERSION = "0123456789abcdef0123456789abcdef"
VNET_CREATE = {"mode": "create", "subnets": [{"name": "nodes", "cidr": "10.224.0.0/16"}]}


def _id(resource: str, group: str = "net") -> str:
    return f"{SUBSCRIPTION}/resourceGroups/{group}/providers/{resource}"


def _private_api(zone: str, vnet_integration: bool = False) -> dict[str, Any]:
    return edit(base_spec(), "controlPlane.apiServer", {"access": "private", "privateDnsZone": zone,
                                                        "vnetIntegration": vnet_integration})


def _private_registry(zone: str) -> dict[str, Any]:
    return edit(edit(base_spec(), "network.vnet", VNET_CREATE), "registry",
                {"publicNetworkAccess": False, "privateDnsZoneId": zone})


def _existing_kms(vault: str, key: str) -> dict[str, Any]:
    return edit(base_spec(), "security.kms", {"mode": "existing", "networkAccess": "Public", "keyVaultId": vault,
                                             "keyId": key})


VAULT = _id("Microsoft.KeyVault/vaults/corp-kms", "sec")
KEY = f"https://corp-kms.vault.azure.net/keys/aks/{KEY_VERSION}"

# field: (the spec with `value` at the field, the field's path in messages, a valid value)
FIELDS = {
    "apiServerZone": (lambda v: _private_api(v), "controlPlane.apiServer.privateDnsZone",
                      _id("Microsoft.Network/privateDnsZones/privatelink.westeurope.azmk8s.io")),
    "registryZone": (_private_registry, "registry.privateDnsZoneId",
                     _id("Microsoft.Network/privateDnsZones/privatelink.azurecr.io")),
    "registry": (lambda v: edit(base_spec(), "registry", {"mode": "existing", "id": v}), "registry.id",
                 _id("Microsoft.ContainerRegistry/registries/corpacr01", "shared")),
    "subnet": (lambda v: edit(base_spec(), "network.vnet", {"mode": "existing",
                                                            "subnets": [{"name": "nodes", "id": v}]}),
               "network.vnet.subnets[0].id", _id("Microsoft.Network/virtualNetworks/vnet-hub/subnets/nodes")),
    "workspace": (lambda v: edit(base_spec(), "monitoring.logAnalytics", {"mode": "existing", "workspaceId": v}),
                  "monitoring.logAnalytics.workspaceId",
                  _id("Microsoft.OperationalInsights/workspaces/corp-logs", "ops")),
    "keyVault": (lambda v: _existing_kms(v, KEY), "security.kms.keyVaultId", VAULT),
    "diskEncryptionSet": (lambda v: edit(base_spec(), "security.diskEncryption", {"mode": "existing",
                                                                                  "diskEncryptionSetId": v}),
                          "security.diskEncryption.diskEncryptionSetId",
                          _id("Microsoft.Compute/diskEncryptionSets/corp-disks", "sec")),
    "capacityReservation": (lambda v: edit(base_spec(), "nodePools.0.capacityReservationGroupId", v),
                            "nodePools[0].capacityReservationGroupId",
                            _id("Microsoft.Compute/capacityReservationGroups/h100", "capacity")),
    "proximityPlacement": (lambda v: edit(edit(base_spec(), "nodePools.0.zones", ["1"]),
                                          "nodePools.0.proximityPlacementGroupId", v),
                           "nodePools[0].proximityPlacementGroupId",
                           _id("Microsoft.Compute/proximityPlacementGroups/ppg-h100")),
    "actionGroup": (lambda v: edit(edit(edit(base_spec(), "monitoring.managedPrometheus", True),
                                        "gpuHealth.metrics.scraper", "managedPrometheus"),
                                   "gpuHealth.alerts.actionGroupIds", [v]),
                    "gpuHealth.alerts.actionGroupIds[0]", _id("Microsoft.Insights/actionGroups/oncall", "ops")),
}


def _all_errors(spec: dict[str, Any]) -> list[Any]:
    try:
        parse_cluster_spec(spec)
    except SpecError as error:
        return list(error.errors)
    return []


def _errors_at(spec: dict[str, Any], path: str) -> list[Any]:
    return [issue for issue in _all_errors(spec) if issue.path == path]


@pytest.mark.parametrize("field", sorted(FIELDS))
def test_a_valid_id_passes_and_arm_compares_it_case_insensitively(field: str) -> None:
    make, path, valid = FIELDS[field]
    assert _errors_at(make(valid), path) == []
    # ARM compares keywords, namespaces and types case-insensitively (Learn naming rules).
    shouted = valid.replace("resourceGroups", "RESOURCEGROUPS")
    shouted = shouted.replace("/providers/Microsoft.", "/providers/microsoft.")
    assert _errors_at(make(shouted), path) == []


# (name, how to break a valid ID, a fragment of the one error's rule)
HOSTILE = [
    ("empty", lambda v: "", "it is empty"),
    ("whitespace", lambda v: "   ", "it is empty"),
    ("spaces around", lambda v: f" {v}\n", "spaces or line breaks around it"),
    ("trailing slash", lambda v: v + "/", "it ends with '/'"),
    ("control character", lambda v: v.replace("/providers/", "/providers/\x00", 1), "control character"),
    ("line break inside", lambda v: v[:-1] + "\n" + v[-1], "control character or line break"),
    ("no leading slash", lambda v: v[1:], "does not start with /subscriptions/"),
    ("a name, not an ID", lambda v: v.rsplit("/", 1)[-1], "does not start with /subscriptions/"),
    ("non-GUID subscription", lambda v: v.replace(GUID, "my-subscription"), "'my-subscription' is not a GUID"),
    ("empty segment", lambda v: v.replace("/providers/", "/providers//"), "empty segment"),
    ("no providers", lambda v: v.replace("/providers/", "/provider/"), "not of that form"),
    ("bad resource group", lambda v: _bad_group(v), "resource group name 'rg-ends-with-a-dot.'"),
    ("wrong provider", lambda v: v.replace("/providers/Microsoft.", "/providers/Contoso."), "it names a Contoso."),
    ("wrong type", lambda v: _id("Microsoft.Storage/storageAccounts/corpstore"),
     "it names a Microsoft.Storage/storageAccounts"),
]


def _bad_group(resource_id: str) -> str:
    parts = resource_id.split("/")
    parts[4] = "rg-ends-with-a-dot."
    return "/".join(parts)


@pytest.mark.parametrize("field", sorted(FIELDS))
@pytest.mark.parametrize(("case", "breaks", "fragment"), HOSTILE, ids=[case for case, _, _ in HOSTILE])
def test_a_hostile_id_is_one_error_naming_the_rule_and_the_fix(field: str, case: str, breaks: Any,
                                                                fragment: str) -> None:
    make, path, valid = FIELDS[field]
    value = breaks(valid)
    errors = _errors_at(make(value), path)
    assert len(errors) == 1, (case, errors)
    [issue] = errors
    assert issue.value == value and fragment in issue.rule, issue
    assert "resource ID of" in issue.rule and "/subscriptions/<subscription GUID>/resourceGroups/<group>" in issue.rule
    assert "copy it from `az " in issue.fix and "--query id`" in issue.fix


def test_a_required_id_left_out_says_what_it_must_be() -> None:
    spec = edit(base_spec(), "security.diskEncryption", {"mode": "existing"})
    [issue] = _errors_at(spec, "security.diskEncryption.diskEncryptionSetId")
    assert "resource ID of an existing disk encryption set" in issue.rule and "az disk-encryption-set" in issue.fix


@pytest.mark.parametrize(("field", "resource", "fragment"), [
    ("subnet", "Microsoft.Network/virtualNetworks/vnet-hub", "it names a Microsoft.Network/virtualNetworks"),
    ("subnet", "Microsoft.Network/virtualNetworks/v/subnets/nodes", "virtual network name 'v'"),
    ("subnet", "Microsoft.Network/virtualNetworks/vnet-hub/subnets/-nodes", "subnet name '-nodes'"),
    ("keyVault", "Microsoft.KeyVault/vaults/kv--double", "Key Vault name 'kv--double'"),
    ("registry", "Microsoft.ContainerRegistry/registries/acr1", "container registry name 'acr1'"),
    ("registry", "Microsoft.ContainerRegistry/registries/my-acr", "container registry name 'my-acr'"),
    ("workspace", "Microsoft.OperationalInsights/workspaces/ab", "Log Analytics workspace name 'ab'"),
    ("diskEncryptionSet", "Microsoft.Compute/diskEncryptionSets/disks.1", "disk encryption set name 'disks.1'"),
    ("actionGroup", "Microsoft.Insights/actionGroups/on:call", "action group name 'on:call'"),
    ("registryZone", "Microsoft.Network/privateDnsZones/privatelink.azurecr.io/A/x", "it names a"),
])
def test_each_name_in_an_id_keeps_its_rule(field: str, resource: str, fragment: str) -> None:
    make, path, _ = FIELDS[field]
    [issue] = _errors_at(make(_id(resource)), path)
    assert fragment in issue.rule, issue


# --- the private DNS zones Azure requires by name --------------------------------------------------

ZONES = "Microsoft.Network/privateDnsZones/"


@pytest.mark.parametrize(("zone", "vnet_integration"), [
    ("privatelink.westeurope.azmk8s.io", False),
    ("PrivateLink.WestEurope.azmk8s.io", False),  # DNS names are case-insensitive
    ("team-a.privatelink.westeurope.azmk8s.io", False),
    ("a" * 32 + ".privatelink.westeurope.azmk8s.io", False),
    ("private.westeurope.azmk8s.io", True),
    ("team-a.private.westeurope.azmk8s.io", True),
])
def test_the_api_server_zones_aks_takes(zone: str, vnet_integration: bool) -> None:
    spec = _private_api(_id(ZONES + zone), vnet_integration)
    assert _errors_at(spec, "controlPlane.apiServer.privateDnsZone") == []


@pytest.mark.parametrize(("zone", "vnet_integration", "fragment"), [
    ("privatelink.eastus2.azmk8s.io", False, "that zone is for region eastus2, and the cluster is in westeurope"),
    ("team-a.privatelink.eastus2.azmk8s.io", False, "that zone is for region eastus2"),
    ("private.westeurope.azmk8s.io", False, "is for API server VNet integration"),
    ("contoso.internal", False, "not 'contoso.internal'"),
    ("privatelink.azurecr.io", False, "privatelink.westeurope.azmk8s.io or <subzone>.privatelink.westeurope"),
    ("privatelink.westeurope.azmk8s.io.evil.com", False, "needs a private DNS zone named"),
    ("a" * 33 + ".privatelink.westeurope.azmk8s.io", False, "has 33 characters; Azure takes at most 32"),
])
def test_an_api_server_zone_aks_refuses(zone: str, vnet_integration: bool, fragment: str) -> None:
    spec = _private_api(_id(ZONES + zone), vnet_integration)
    [issue] = _errors_at(spec, "controlPlane.apiServer.privateDnsZone")
    assert fragment in issue.rule, issue
    assert "privatelink.westeurope.azmk8s.io" in issue.fix or "subzone" in issue.fix


def test_system_and_none_stay_the_api_servers_other_choices() -> None:
    for zone in ("system", "none"):
        assert _errors_at(_private_api(zone), "controlPlane.apiServer.privateDnsZone") == []
    [issue] = _errors_at(_private_api("System "), "controlPlane.apiServer.privateDnsZone")
    assert issue.rule.startswith('must be "system", "none" or the resource ID of a private DNS zone')
    assert 'use "system" to let AKS manage it' in issue.fix


@pytest.mark.parametrize("zone", ["privatelink.westeurope.azmk8s.io", "registry.privatelink.azurecr.io",
                                  "privatelink.azurecr.io.contoso.com", "azurecr.io"])
def test_the_registry_zone_is_privatelink_azurecr_io(zone: str) -> None:
    [issue] = _errors_at(_private_registry(_id(ZONES + zone)), "registry.privateDnsZoneId")
    assert "needs a private DNS zone named privatelink.azurecr.io" in issue.rule
    assert "-n privatelink.azurecr.io --query id" in issue.fix
    assert _errors_at(_private_registry(_id(ZONES + "PRIVATELINK.AZURECR.IO")), "registry.privateDnsZoneId") == []


# --- Key Vault key identifiers ----------------------------------------------------------------------


@pytest.mark.parametrize(("key", "fragment"), [
    ("", "it is empty"),
    (f" {KEY}", "spaces or line breaks around it"),
    (KEY + "/", "it ends with '/'"),
    (KEY.replace("https://", "http://"), "does not start with https://"),
    (KEY.replace(".vault.azure.net", ".managedhsm.azure.net"), "is not <vault>.vault.azure.net"),
    (KEY.replace(".vault.azure.net", ".vault.azure.net:443"), "is not <vault>.vault.azure.net"),
    (KEY.rsplit("/", 1)[0], "it has no version"),
    (KEY.replace("/keys/", "/secrets/"), "is not /keys/<key name>/<version>"),
    (KEY + "?api-version=7.4", "query or fragment"),
    (KEY.replace("/aks/", "/aks_key/"), "key name 'aks_key'"),
    (KEY.replace("corp-kms", "kv"), "vault name 'kv'"),
    (KEY.replace(KEY_VERSION, "latest"), "version 'latest' is not the 32 hexadecimal"),
])
def test_a_hostile_key_id_is_one_error(key: str, fragment: str) -> None:
    [issue] = _errors_at(_existing_kms(VAULT, key), "security.kms.keyId")
    assert issue.value == key and fragment in issue.rule, issue
    assert "https://<vault>.vault.azure.net/keys/<key name>/<32-character version>" in issue.rule
    assert "az keyvault key show" in issue.fix


def test_a_key_of_another_vault_is_refused_case_insensitively() -> None:
    assert _errors_at(_existing_kms(VAULT, KEY.replace("corp-kms", "CORP-KMS")), "security.kms.keyId") == []
    [issue] = _errors_at(_existing_kms(VAULT, KEY.replace("corp-kms", "other-kms")), "security.kms.keyId")
    assert "not in the vault keyVaultId names (corp-kms)" in issue.rule


def test_the_parsers_give_the_parts() -> None:
    parsed = parse(_id("Microsoft.Network/virtualNetworks/vnet-hub/subnets/nodes"))
    assert parsed == ResourceId(GUID, "net", "Microsoft.Network", ("virtualNetworks", "subnets"), ("vnet-hub", "nodes"))
    assert parsed.resource_type == "Microsoft.Network/virtualNetworks/subnets" and parsed.name == "nodes"
    key = parse_key_id(KEY)
    assert not isinstance(key, str) and (key.vault, key.name, key.version) == ("corp-kms", "aks", KEY_VERSION)


# --- names the user sets for Azure resources ---------------------------------------------------------


@pytest.mark.parametrize(("path", "edits", "value", "fragment"), [
    ("monitoring.logAnalytics.name", [("monitoring.logAnalytics.name", "a_b")], "a_b",
     "Log Analytics workspace name (Microsoft.OperationalInsights/workspaces): 4-63"),
    ("monitoring.logAnalytics.name", [("monitoring.logAnalytics.name", "-logs-")], "-logs-", "4-63"),
    ("monitoring.logAnalytics.name", [("monitoring.logAnalytics.name", "w" * 64)], "w" * 64, "4-63"),
    ("network.vnet.name", [("network.vnet", {**VNET_CREATE, "name": "bad vnet"})], "bad vnet",
     "virtual network name (Microsoft.Network/virtualNetworks): 2-64"),
    ("network.vnet.name", [("network.vnet", {**VNET_CREATE, "name": "v"})], "v", "2-64"),
    ("network.vnet.name", [("network.vnet", {**VNET_CREATE, "name": "vnet."})], "vnet.", "ending with a letter"),
    ("network.vnet.subnets[0].name", [("network.vnet", {"mode": "create", "nodeSubnet": "gpu nodes",
                                                        "subnets": [{"name": "gpu nodes", "cidr": "10.224.0.0/16"}]})],
     "gpu nodes", "subnet name (Microsoft.Network/virtualNetworks/subnets): 1-80"),
    ("network.vnet.inbound[0].name", [("network.vnet", {**VNET_CREATE, "inbound": [
        {"name": "allow https!", "ports": [443], "sources": ["Internet"]}]})], "allow https!",
     "network security rule name (Microsoft.Network/networkSecurityGroups/securityRules)"),
    ("registry.name", [("registry.name", "my-registry")], "my-registry",
     "container registry name (Microsoft.ContainerRegistry/registries): 5-50 letters and digits"),
    ("registry.name", [("registry.name", "acr")], "acr", "5-50"),
    ("security.kms.keyVaultName", [("security.kms", {"mode": "create", "networkAccess": "Public",
                                                     "keyVaultName": "1-kms"})], "1-kms",
     "Key Vault name (Microsoft.KeyVault/vaults): 3-24"),
])
def test_a_name_the_user_sets_keeps_azures_rule(path: str, edits: list[tuple[str, Any]], value: str,
                                                fragment: str) -> None:
    spec = base_spec()
    for where, new in edits:
        spec = edit(spec, where, new)
    errors = _errors_at(spec, path)
    assert len(errors) == 1, errors
    assert errors[0].value == value and fragment in errors[0].rule, errors[0]
    # The derived NSG name of a subnet whose own name is wrong is not reported a second time.
    assert not [issue for issue in _all_errors(spec) if "network security group name aksgpu derives" in issue.rule]


def test_a_subnet_of_an_existing_vnet_is_named_by_its_id() -> None:
    # With vnet.mode existing the name is the spec's label for the subnet; Azure's name is in the ID.
    spec = edit(base_spec(), "network.vnet", {"mode": "existing", "nodeSubnet": "gpu nodes", "subnets": [
        {"name": "gpu nodes", "id": FIELDS["subnet"][2]}]})
    assert _all_errors(spec) == []


@pytest.mark.parametrize(("path", "value", "fragment"), [
    ("registry.name", "fleet-acr", "container registry name (Microsoft.ContainerRegistry/registries)"),
    ("name", "f" * 60, 'the Log Analytics workspace name aksgpu derives from it, "' + "f" * 60 + "-eastus2-logs"),
])
def test_fleet_names_keep_azures_rules(path: str, value: str, fragment: str) -> None:
    raw = edit(_shared_raw(), path, value)
    if path == "name":
        raw = edit(raw, "registry.name", "fleetacr01")
    with pytest.raises(SpecError) as error:
        parse_fleet_spec(raw)
    assert fragment in str(error.value)
    assert len([issue for issue in error.value.errors if issue.path == path]) >= 1


def test_a_long_fleet_name_is_fine_when_members_keep_their_own_workspaces() -> None:
    raw = edit(edit(_shared_raw(), "name", "f" * 60), "registry.name", "fleetacr01")
    raw = edit(raw, "logAnalytics", {"mode": "perMember"})
    parse_fleet_spec(raw)


def test_remove_is_the_helpers_marker() -> None:
    # edit(..., REMOVE) drops a key: a spec without the ID is a different case from an empty ID.
    spec = edit(edit(base_spec(), "registry", {"mode": "existing", "id": ""}), "registry.id", REMOVE)
    [issue] = _errors_at(spec, "registry.id")
    assert issue.value is None and "resource ID of an existing container registry" in issue.rule
