"""Resource IDs and Key Vault key identifiers the user passes, parsed and checked in one place.

An ARM resource ID is /subscriptions/<subscription GUID>/resourceGroups/<group>/providers/
<Namespace>/<type>/<name>, with /<child type>/<child name> pairs for a child resource (a subnet).
The subscription is a UUID (azure-rest-api-specs common-types/resource-management/v5/types.json,
SubscriptionIdParameter, format uuid); the resource group and each name follow Azure's naming
rules (catalog/azure_names.yaml); ARM compares namespaces, types and names case-insensitively
(Learn, "Naming rules and restrictions for Azure resources": "Always perform a case-insensitive
comparison of names"; checked 2026-11-27). Where Azure requires a private DNS zone of a given
name, the zone is checked too (catalog/azure_names.yaml privateDnsZones, each with its source).

Each check yields at most one Issue per field: the first thing wrong, the shape the field needs
and the command that prints the right ID.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

from aksgpu import catalog

from aksgpu.spec import names
from aksgpu.spec.base import Issue

GUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
RESOURCE_GROUPS = "Microsoft.Resources/resourceGroups"
# No Azure resource name holds one (Learn naming rules: "control characters" are refused wherever listed).
CONTROL = re.compile("[\x00-\x1f\x7f]")
# A Key Vault key's versioned identifier: https://<vault>.vault.azure.net/keys/<name>/<version>; the
# version is 32 hex characters Key Vault generates (Learn, "About Azure Key Vault keys, secrets and
# certificates", Object identifiers: case-insensitive, valid URLs; checked 2026-11-27).
KEY_HOST_SUFFIX = ".vault.azure.net"
KEY_VERSION = re.compile(r"^[0-9a-fA-F]{32}$")
KEY_SHAPE = "https://<vault>.vault.azure.net/keys/<key name>/<32-character version>"


class Kind(NamedTuple):
    """What the messages call a resource type, and the command that prints a resource's ID."""

    label: str
    show: str


KINDS: dict[str, Kind] = {
    "Microsoft.Network/privateDnsZones": Kind("private DNS zone",
                                              "az network private-dns zone show -g GROUP -n ZONE --query id"),
    "Microsoft.Network/virtualNetworks/subnets": Kind(
        "subnet", "az network vnet subnet show -g GROUP --vnet-name VNET -n SUBNET --query id"),
    "Microsoft.KeyVault/vaults": Kind("Key Vault", "az keyvault show -n NAME --query id"),
    "Microsoft.Compute/diskEncryptionSets": Kind("disk encryption set",
                                                 "az disk-encryption-set show -g GROUP -n NAME --query id"),
    "Microsoft.OperationalInsights/workspaces": Kind(
        "Log Analytics workspace", "az monitor log-analytics workspace show -g GROUP -n NAME --query id"),
    "Microsoft.ContainerRegistry/registries": Kind("container registry", "az acr show -n NAME --query id"),
    "Microsoft.Compute/capacityReservationGroups": Kind(
        "capacity reservation group", "az capacity reservation group show -g GROUP -n NAME --query id"),
    "Microsoft.Compute/proximityPlacementGroups": Kind("proximity placement group",
                                                       "az ppg show -g GROUP -n NAME --query id"),
    "Microsoft.Insights/actionGroups": Kind("Azure Monitor action group",
                                            "az monitor action-group show -g GROUP -n NAME --query id"),
}


@dataclass(frozen=True)
class ResourceId:
    """The parts of an ARM resource ID: types and names hold the pairs after the namespace."""

    subscription: str
    resource_group: str
    namespace: str
    types: tuple[str, ...]
    names: tuple[str, ...]

    @property
    def resource_type(self) -> str:
        return "/".join((self.namespace, *self.types))

    @property
    def name(self) -> str:
        return self.names[-1]


def shape(resource_type: str) -> str:
    """The form of a `resource_type` ID, e.g. /subscriptions/<subscription GUID>/.../subnets/<name>."""
    namespace, *types = resource_type.split("/")
    pairs = "".join(f"/{kind}/<name>" for kind in types)
    return f"/subscriptions/<subscription GUID>/resourceGroups/<group>/providers/{namespace}{pairs}"


def _name_problem(what: str, name: str, resource_type: str) -> str | None:
    if names.obeys(resource_type, name):
        return None
    return f"its {what} name {name!r} breaks Azure's rule: {names.rule_of(resource_type)['rule']}"


def parse(text: str) -> ResourceId | str:
    """The parts of the ARM resource ID `text`, or why it is not one (for a message)."""
    if not text.strip():
        return "it is empty"
    if text != text.strip():
        return "it has spaces or line breaks around it"
    if text.endswith("/"):
        return "it ends with '/'"
    if CONTROL.search(text):
        return "it holds a control character or line break"
    if not text.startswith("/"):
        return "it does not start with /subscriptions/"
    parts = text[1:].split("/")
    if "" in parts:
        return "it has an empty segment ('//')"
    keywords = [part.lower() for part in parts[0:6:2]]
    if len(parts) < 8 or len(parts) % 2 or keywords != ["subscriptions", "resourcegroups", "providers"]:
        return "it is not of that form"
    subscription, group, namespace = parts[1], parts[3], parts[5]
    if not GUID.fullmatch(subscription):
        return f"its subscription {subscription!r} is not a GUID"
    problem = _name_problem("resource group", group, RESOURCE_GROUPS)
    if problem:
        return problem
    return ResourceId(subscription, group, namespace, tuple(parts[6::2]), tuple(parts[7::2]))


def check_id(path: str, value: str | None, resource_type: str, *, required: bool = True) -> Iterator[Issue]:
    """At most one Issue: `value` is not the ID of a `resource_type` (a KINDS key); None is one
    only when `required`. Each name in it is held to its type's rule where the table has one."""
    if value is None and not required:
        return
    yield from _id_issues(path, value, resource_type)


def _id_issues(path: str, value: str | None, resource_type: str) -> Iterator[Issue]:
    """The first thing wrong with `value`, if any (one Issue at most)."""
    kind = KINDS[resource_type]
    rule = f"must be the resource ID of {names.article(kind.label)}, {shape(resource_type)}"
    fix = f"copy it from `{kind.show}`"
    if value is None:
        yield Issue(path, value, f"must be the resource ID of an existing {kind.label}, {shape(resource_type)}", fix)
        return
    parsed = parse(value)
    if isinstance(parsed, str):
        yield Issue(path, value, f"{rule}; {parsed}", fix)
        return
    if parsed.resource_type.lower() != resource_type.lower():
        yield Issue(path, value, f"{rule}; it names {names.article(parsed.resource_type)}", fix)
        return
    types = resource_type.split("/")[1:]
    namespace = resource_type.split("/")[0]
    for depth, name in enumerate(parsed.names):
        row = "/".join((namespace, *types[:depth + 1]))
        if row in catalog.load("azure_names")["rules"]:
            problem = _name_problem(names.rule_of(row)["label"], name, row)
            if problem:
                yield Issue(path, value, f"{rule}; {problem}", fix)
                return


# --- private DNS zones Azure requires by name ----------------------------------------------------


def _zone_pattern(template: str, location: str) -> re.Pattern[str]:
    """`template` as a pattern: {location} the given region (any region when empty), {subzone} labels."""
    region = re.escape(location) if location else r"(?P<location>[a-z0-9]+)"
    text = re.escape(template).replace(re.escape("{location}"), region)
    return re.compile("^" + text.replace(re.escape("{subzone}"), r"(?P<subzone>[a-z0-9_-]+(?:\.[a-z0-9_-]+)*)") + "$")


def check_zone_id(path: str, value: str, service: str, location: str = "",
                  vnet_integration: bool = False) -> Iterator[Issue]:
    """At most one Issue: `value` is not the ID of a private DNS zone with the name Azure requires
    for `service` (a key of catalog/azure_names.yaml privateDnsZones) in `location`."""
    issues = list(check_id(path, value, "Microsoft.Network/privateDnsZones"))
    if issues:
        yield from issues
        return
    parsed = parse(value)
    assert isinstance(parsed, ResourceId)
    zone = parsed.name.lower()
    table = catalog.load("azure_names")["privateDnsZones"][service]
    templates = list(table["zones"]) + (list(table["vnetIntegrationZones"]) if vnet_integration else [])
    wanted = " or ".join(template.replace("{location}", location).replace("{subzone}", "<subzone>")
                         for template in templates)
    zone_name = table["zones"][0].replace("{location}", location)
    fix = (f"give the ID of a zone named {zone_name}" + (" (or <subzone>. before it)" if table["subzoneMax"] else "")
           + f": `az network private-dns zone show -g GROUP -n {zone_name} --query id`")
    for template in templates:
        match = _zone_pattern(template, location).fullmatch(zone)
        if match is None:
            continue
        subzone = match.groupdict().get("subzone") or ""
        if len(subzone) > table["subzoneMax"]:
            yield Issue(path, value, f"the zone's <subzone>, {subzone!r}, has {len(subzone)} characters; Azure "
                        f"takes at most {table['subzoneMax']}", "shorten the subzone")
        return
    rule = f"the {table['label']} needs a private DNS zone named {wanted}, not {parsed.name!r}"
    for template in templates + list(table["vnetIntegrationZones"]):
        match = _zone_pattern(template, "").fullmatch(zone)
        if match is None:
            continue
        region = match.groupdict().get("location")
        if region != location:
            rule = f"{rule}: that zone is for region {region}, and the cluster is in {location}"
        else:
            rule = f"{rule}: {template} is for API server VNet integration (controlPlane.apiServer.vnetIntegration)"
        break
    yield Issue(path, value, rule, fix)


# --- Key Vault key identifiers ----------------------------------------------------------------------


@dataclass(frozen=True)
class KeyId:
    """A versioned Key Vault key identifier's parts."""

    vault: str
    name: str
    version: str


def parse_key_id(text: str) -> KeyId | str:
    """The parts of a versioned key identifier, or why `text` is not one (for a message)."""
    if not text.strip():
        return "it is empty"
    if text != text.strip():
        return "it has spaces or line breaks around it"
    if not text.lower().startswith("https://"):
        return "it does not start with https://"
    if any(mark in text for mark in "?#"):
        return "it has a query or fragment ('?' or '#')"
    host, _, rest = text[len("https://"):].partition("/")
    if not host.lower().endswith(KEY_HOST_SUFFIX):
        return f"its host {host!r} is not <vault>{KEY_HOST_SUFFIX}"
    vault = host[:-len(KEY_HOST_SUFFIX)]
    parts = rest.split("/")
    if rest.endswith("/"):
        return "it ends with '/'"
    if len(parts) == 2 and parts[0].lower() == "keys":
        return "it has no version (a key identifier without /<version> is not a version AKS can use)"
    if len(parts) != 3 or parts[0].lower() != "keys":
        return "its path is not /keys/<key name>/<version>"
    problem = (_name_problem("vault", vault, "Microsoft.KeyVault/vaults")
               or _name_problem("key", parts[1], "Microsoft.KeyVault/vaults/keys"))
    if problem:
        return problem
    if not KEY_VERSION.fullmatch(parts[2]):
        return f"its version {parts[2]!r} is not the 32 hexadecimal characters Key Vault gives a version"
    return KeyId(vault, parts[1], parts[2])


def check_key_id(path: str, value: str | None) -> Iterator[Issue]:
    """At most one Issue: `value` is not a versioned Key Vault key identifier."""
    rule = f"must be a key identifier with its version, {KEY_SHAPE}"
    fix = "copy it from `az keyvault key show --vault-name VAULT -n KEY --query key.kid`"
    parsed = parse_key_id(value) if value is not None else "it is not set"
    if isinstance(parsed, str):
        yield Issue(path, value, f"{rule}; {parsed}", fix)
