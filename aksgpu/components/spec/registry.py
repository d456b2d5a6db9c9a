"""The container registry the nodes pull from: created by aksgpu, an existing one, or none."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal

from .base import Issue, SpecModel

if TYPE_CHECKING:
    from . import ClusterSpec

REGISTRY_NAME = re.compile(r"^[a-zA-Z0-9]{5,50}$")
REGISTRY_ID = re.compile(
    r"^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.ContainerRegistry/registries/[a-zA-Z0-9]+$",
    re.IGNORECASE,
)


class Registry(SpecModel):
    """Azure Container Registry; the kubelet identity gets AcrPull on it."""

    mode: Literal["create", "existing", "none"] = "create"
    """create: aksgpu creates a registry (admin user off); existing: use the registry given by id; none: no registry."""
    name: str | None = None
    """Name of the registry aksgpu creates: 5-50 letters and digits, unique across Azure. None: the cluster name's letters and digits, lowercased, plus "acr"."""
    sku: Literal["Basic", "Standard", "Premium"] = "Premium"
    """SKU of the registry aksgpu creates; zone redundancy needs Premium."""
    zone_redundancy: bool = True
    """Make the registry aksgpu creates zone-redundant; needs sku Premium."""
    id: str | None = None
    """Resource ID of an existing registry (mode existing only)."""


def default_registry_name(cluster_name: str) -> str:
    """ACR names are 5-50 letters and digits and globally unique: derive one from the cluster."""
    base = re.sub(r"[^a-zA-Z0-9]", "", cluster_name).lower()[:47]
    return f"{base}acr"


def check_registry(spec: ClusterSpec) -> Iterator[Issue]:
    registry = spec.registry
    if registry.mode == "create":
        name = registry.name or default_registry_name(spec.name)
        if not REGISTRY_NAME.fullmatch(name):
            yield Issue("registry.name", name, "ACR names are 5-50 letters and digits, unique across Azure",
                        "set registry.name to such a name")
        if registry.zone_redundancy and registry.sku != "Premium":
            yield Issue("registry.zoneRedundancy", True, "zone redundancy needs the Premium SKU",
                        "set registry.sku: Premium, or zoneRedundancy: false")
        if registry.id is not None:
            yield Issue("registry.id", registry.id, "an id is for mode: existing", "remove id, or set mode: existing")
    elif registry.mode == "existing":
        if registry.id is None or not REGISTRY_ID.fullmatch(registry.id):
            yield Issue("registry.id", registry.id, "must be the resource ID of an existing container registry",
                        "copy it from `az acr show -n NAME --query id`")
