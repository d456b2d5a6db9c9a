"""The container registry the nodes pull from: created by aksgpu, an existing one, or none."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from aksgpu.spec import names
from aksgpu.spec.base import Issue, SpecModel, did_you_mean
from aksgpu.spec.resource_ids import check_id, check_zone_id

if TYPE_CHECKING:
    from aksgpu.spec import ClusterSpec

REGISTRY_TYPE = "Microsoft.ContainerRegistry/registries"


class Registry(SpecModel):
    """Azure Container Registry; the kubelet identity gets AcrPull on it."""

    mode: Literal["create", "existing", "fleet", "none"] = "create"
    """create: aksgpu creates a registry (admin user off); existing: use the registry given by id; fleet: the registry of the cluster's fleet (a fleet member only), reached through a private endpoint in this cluster's VNet unless publicNetworkAccess; none: no registry."""
    name: str | None = None
    """Name of the registry aksgpu creates: 5-50 letters and digits, unique across Azure (<name>.azurecr.io). `aksgpu render` writes it into the stack file: a name set here as written; for a new environment the cluster name's letters and digits, lowercased, plus "acr" and six characters from a hash of the resource group, location and cluster name (gpuprodacr7m73ow), so environments with the same cluster name differ; an environment rendered before keeps the name it has (no suffix: None in a stack file means that name). Changing it replaces the registry and its images."""
    sku: Literal["Basic", "Standard", "Premium"] = "Premium"
    """SKU of the registry aksgpu creates; zone redundancy needs Premium."""
    zone_redundancy: bool = True
    """Make the registry aksgpu creates zone-redundant; needs sku Premium."""
    id: str | None = None
    """Resource ID of an existing registry (mode existing only): /subscriptions/<subscription GUID>/resourceGroups/<group>/providers/Microsoft.ContainerRegistry/registries/<name>."""
    public_network_access: bool = False
    """Let the registry aksgpu creates be reached from the internet. false (policy acr-public-network): only through a private endpoint aksgpu adds in the cluster's VNet, with its privatelink.azurecr.io DNS zone, and image export off (policy acr-export); needs sku Premium and a network.vnet that aksgpu creates or is given. Pushing images then needs a machine in (or peered with) that VNet."""
    private_endpoint_subnet: str | None = None
    """Name of the subnet in network.vnet.subnets for the registry's private endpoint. None: network.vnet.nodeSubnet."""
    private_dns_zone_id: str | None = None
    """Resource ID of an existing privatelink.azurecr.io private DNS zone (e.g. a hub's) that the private endpoint registers in, already linked to the cluster's VNet. None: aksgpu creates the zone in the resource group and links it to the VNet (one such zone per resource group)."""
    untagged_retention_days: int | None = Field(default=7, ge=0, le=365)
    """Days (0-365) an untagged manifest is kept before the registry deletes it (policy acr-retention; needs sku Premium). None: kept for ever."""


def default_registry_name(cluster_name: str) -> str:
    """ACR names are 5-50 letters and digits and globally unique: derive one from the cluster."""
    base = re.sub(r"[^a-zA-Z0-9]", "", cluster_name).lower()[:47]
    return f"{base}acr"


def check_registry(spec: ClusterSpec) -> Iterator[Issue]:
    registry = spec.registry
    if registry.mode == "create":
        name = registry.name or default_registry_name(spec.name)
        yield from names.check_name("registry.name", name, REGISTRY_TYPE, "set registry.name to such a name")
        if registry.zone_redundancy and registry.sku != "Premium":
            yield Issue("registry.zoneRedundancy", True, "zone redundancy needs the Premium SKU",
                        "set registry.sku: Premium, or zoneRedundancy: false")
        if registry.id is not None:
            yield Issue("registry.id", registry.id, "an id is for mode: existing", "remove id, or set mode: existing")
        if not registry.public_network_access:
            if registry.sku != "Premium":
                yield Issue("registry.publicNetworkAccess", False, "a registry without public access is reached "
                            "through a private endpoint, which needs the Premium SKU",
                            "set registry.sku: Premium, or publicNetworkAccess: true")
            yield from _check_private_endpoint(spec)
        if registry.untagged_retention_days is not None and registry.sku != "Premium":
            yield Issue("registry.untaggedRetentionDays", registry.untagged_retention_days,
                        "the retention policy for untagged manifests needs the Premium SKU",
                        "set registry.sku: Premium, or untaggedRetentionDays: null")
    elif registry.mode == "fleet":
        if spec.fleet is None:
            yield Issue("registry.mode", "fleet", "the fleet's registry is for a member of a fleet",
                        "set mode to create, existing or none; fleet members are rendered from a fleet environment")
        if registry.id is not None:
            yield Issue("registry.id", registry.id, "an id is for mode: existing", "remove id, or set mode: existing")
        if not registry.public_network_access:
            yield from _check_private_endpoint(spec)
    elif registry.mode == "existing":
        yield from check_id("registry.id", registry.id, REGISTRY_TYPE)
    if registry.mode not in ("create", "fleet"):
        for field, value in (("privateEndpointSubnet", registry.private_endpoint_subnet),
                             ("privateDnsZoneId", registry.private_dns_zone_id)):
            if value is not None:
                yield Issue(f"registry.{field}", value, "aksgpu adds a private endpoint only to a registry it creates",
                            "remove it")


def _check_private_endpoint(spec: ClusterSpec) -> Iterator[Issue]:
    """The private endpoint aksgpu adds in the cluster's VNet, to its own registry or the fleet's."""
    registry = spec.registry
    if spec.network.vnet.mode == "managed":
        yield Issue("registry.publicNetworkAccess", False, "the registry's private endpoint goes in the "
                    "cluster's VNet, and an AKS-managed VNet cannot hold it",
                    "set network.vnet.mode to create (with subnets) or existing, or publicNetworkAccess: true")
    else:
        subnet = registry.private_endpoint_subnet or spec.network.vnet.node_subnet
        names = [s.name for s in spec.network.vnet.subnets]
        delegated = {spec.control_plane.api_server.subnet, spec.network.vnet.pod_subnet,
                     *(pool.pod_subnet for pool in spec.node_pools)} - {None}
        if subnet not in names:
            yield Issue("registry.privateEndpointSubnet", subnet, "must name a subnet of network.vnet.subnets",
                        did_you_mean(subnet, names) + "name one of: " + ", ".join(names))
        elif subnet in delegated:
            yield Issue("registry.privateEndpointSubnet", subnet, "this subnet is delegated to AKS (the API "
                        "server's or a pod subnet), and Azure puts no private endpoint in a delegated subnet",
                        "name a node subnet or a subnet of its own")
    if registry.private_dns_zone_id is not None:
        # A registry's private endpoint registers only in privatelink.azurecr.io (catalog/azure_names.yaml).
        yield from check_zone_id("registry.privateDnsZoneId", registry.private_dns_zone_id, REGISTRY_TYPE)
