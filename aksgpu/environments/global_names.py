"""The names of the registry and Key Vault a stack creates, which are unique across all of Azure.

`aksgpu render` writes them into the stack file (registry.name, security.kms.keyVaultName), so
that what Azure will be asked for is fixed in the file and never moves on a re-render:
- a name set in environments.yaml is written as it is;
- a name the stack file on disk already holds is kept (even if the resource group or location
  that derived it changes later);
- a stack file rendered before aksgpu recorded names, whose registry or vault aksgpu already
  creates, gets the name it has used all along: the suffix-less derivation from the cluster name
  (spec/registry.py default_registry_name, spec/security.py key_vault_name). Renaming it would
  replace the registry (its images) or the vault (its keys, without which KMS cannot decrypt);
- anything else (a new environment, or a registry or vault added now) gets a name with a
  suffix from the resource group, location and cluster name (spec/names.py global_suffix), so two
  environments or teams with a cluster named gpu-prod do not both ask for gpuprodacr.

A fleet's shared registry (aksgpu:fleet registry.name) follows the same three rules, its suffix from
the fleet's resource group, location and name (spec/fleet.py suffixed_fleet_registry; the
suffix-less name is spec/fleet.py fleet_registry_name).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, NamedTuple

from aksgpu.spec import default_registry_name, names
from aksgpu.spec.fleet import fleet_registry_name, suffixed_fleet_registry
from aksgpu.spec.security import key_vault_name

if TYPE_CHECKING:
    from aksgpu.spec import ClusterSpec
    from aksgpu.spec.fleet import FleetSpec

REGISTRY = ("registry", "name")
KEY_VAULT = ("security", "kms", "keyVaultName")


def _at(cluster: Any, path: tuple[str, ...]) -> Any:
    node = cluster
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node


def _created_before(cluster: Any, section: tuple[str, ...], default_mode: str) -> bool:
    """Whether the stack file on disk already had aksgpu create this resource (its mode create)."""
    if not isinstance(cluster, dict):
        return False
    mode = _at(cluster, (*section, "mode"))
    return (mode if mode is not None else default_mode) == "create"


def _choose(recorded: Any, created_before: bool, legacy: str, suffixed: str) -> str:
    if isinstance(recorded, str) and recorded:
        return recorded
    return legacy if created_before else suffixed


# Stands for a stack file that exists but whose spec cannot be read (not YAML, edited by hand):
# it may belong to a cluster whose registry and vault exist, so they keep the suffix-less names.
UNREADABLE = {"registry": {"mode": "create"}, "security": {"kms": {"mode": "create"}}}


def with_global_names(spec: ClusterSpec, on_disk: Any) -> ClusterSpec:
    """`spec` with the registry and vault names it creates written in; `on_disk`: the
    `aksgpu:cluster` value of the stack file there now (None when there is none; UNREADABLE)."""
    suffix = names.global_suffix(spec.resource_group.name, spec.location, spec.name)
    registry, kms = spec.registry, spec.security.kms
    if registry.mode == "create" and registry.name is None:
        name = _choose(_at(on_disk, REGISTRY), _created_before(on_disk, ("registry",), "create"),
                       default_registry_name(spec.name), names.suffixed_registry(spec.name, suffix))
        registry = registry.model_copy(update={"name": name})
    if kms.mode == "create" and kms.key_vault_name is None:
        name = _choose(_at(on_disk, KEY_VAULT), _created_before(on_disk, ("security", "kms"), "none"),
                       key_vault_name(spec), names.suffixed_key_vault(spec.name, suffix))
        kms = kms.model_copy(update={"key_vault_name": name})
    if registry is spec.registry and kms is spec.security.kms:
        return spec
    security = spec.security.model_copy(update={"kms": kms})
    return spec.model_copy(update={"registry": registry, "security": security})


def as_named_on_disk(cluster: Any) -> Any:
    """The `aksgpu:cluster` value on disk with the names it left to the suffix-less derivation
    written in, for comparing with a re-render: null there and the recorded name are one name."""
    if not isinstance(cluster, dict) or not isinstance(cluster.get("name"), str):
        return cluster
    cluster = copy.deepcopy(cluster)
    _name_legacy_registry(cluster, default_registry_name(cluster["name"]))
    kms = _at(cluster, ("security", "kms"))
    if isinstance(kms, dict) and kms.get("keyVaultName") is None and _created_before(cluster, ("security", "kms"),
                                                                                      "none"):
        kms["keyVaultName"] = names.legacy_key_vault(cluster["name"])
    return cluster


def as_fleet_named_on_disk(fleet: Any) -> Any:
    """The `aksgpu:fleet` value on disk with the registry name it left to the suffix-less derivation
    written in, as as_named_on_disk does for a cluster."""
    if not isinstance(fleet, dict) or not isinstance(fleet.get("name"), str):
        return fleet
    fleet = copy.deepcopy(fleet)
    _name_legacy_registry(fleet, fleet_registry_name(fleet["name"]))
    return fleet


def _name_legacy_registry(spec: dict[str, Any], legacy: str) -> None:
    """Write `legacy` into a spec on disk whose registry aksgpu creates under a name it left null."""
    registry = spec.get("registry")
    if isinstance(registry, dict) and registry.get("name") is None and _created_before(spec, ("registry",), "create"):
        registry["name"] = legacy


class GlobalName(NamedTuple):
    """A name a spec asks Azure for that is unique across Azure, and the field that sets it."""

    label: str
    name: str
    field: str


def global_names(spec: ClusterSpec) -> list[GlobalName]:
    """Each name the cluster spec asks Azure for that is unique across Azure."""
    found = []
    if spec.registry.mode == "create":
        found.append(GlobalName("registry", spec.registry.name or default_registry_name(spec.name), "registry.name"))
    if spec.security.kms.mode == "create":
        found.append(GlobalName("key vault", key_vault_name(spec), "security.kms.keyVaultName"))
    return found


# --- a fleet's shared stack ----------------------------------------------------------------------


def with_fleet_global_names(spec: FleetSpec, on_disk: Any) -> FleetSpec:
    """`spec` with the name of the registry it creates written in; `on_disk`: the `aksgpu:fleet`
    value of the shared stack file there now (None when there is none; UNREADABLE)."""
    registry = spec.registry
    if registry.mode != "create" or registry.name is not None:
        return spec
    name = _choose(_at(on_disk, REGISTRY), _created_before(on_disk, ("registry",), "create"),
                   fleet_registry_name(spec.name), suffixed_fleet_registry(spec))
    return spec.model_copy(update={"registry": registry.model_copy(update={"name": name})})


def fleet_global_names(spec: FleetSpec) -> list[GlobalName]:
    """Each name the fleet's shared stack asks Azure for that is unique across Azure: its registry
    (a fleet has no Key Vault; its other names, the fleet's and the workspaces', are unique only in
    their resource group: catalog/azure_names.yaml)."""
    if spec.registry.mode != "create":
        return []
    return [GlobalName("registry", spec.registry_name, "fleet.registry.name")]
