"""Registry: the container registry the nodes pull images from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi
from pulumi_azure_native import containerregistry, monitor, privatedns
from pulumi_azure_native import network as azure_network

from aksgpu.components.roles import assign_role
from aksgpu.spec import Registry as RegistrySpec
from aksgpu.spec import default_registry_name, names


@dataclass
class RegistryArgs:
    spec: RegistrySpec
    cluster_name: str
    location: str
    resource_group_name: pulumi.Input[str]
    kubelet_principal_id: pulumi.Input[str]
    subscription_id: pulumi.Input[str]
    protect: bool = False
    tags: dict[str, str] = field(default_factory=dict)
    # Subnet IDs by name, for the private endpoint of a registry without public access.
    subnet_ids: Mapping[str, pulumi.Input[str]] = field(default_factory=dict)
    node_subnet: str = "nodes"
    # The Log Analytics workspace that receives the registry's logs (None: no workspace).
    workspace_id: pulumi.Input[str] | None = None
    # The fleet's registry, for mode fleet (its ID and login server, from the fleet's shared stack).
    fleet_registry_id: pulumi.Input[str] | None = None
    fleet_login_server: pulumi.Input[str] | None = None


# The registry's log categories (learn.microsoft.com azure-monitor reference supported-logs
# microsoft-containerregistry-registries-logs): pushes, pulls and deletes, and sign-ins.
REGISTRY_LOG_CATEGORIES = ("ContainerRegistryRepositoryEvents", "ContainerRegistryLoginEvents")
# Azure's private DNS zone for registries in the public cloud (private-endpoint-dns.md) and the
# private-link sub-resource a registry's endpoint connects to.
REGISTRY_PRIVATE_DNS_ZONE = "privatelink.azurecr.io"
REGISTRY_GROUP_ID = "registry"


class Registry(pulumi.ComponentResource):
    """Creates an ACR (admin user off), or attaches an existing one or the fleet's; either way the
    kubelet identity gets AcrPull on it."""

    registry_id: pulumi.Output[str] | None
    login_server: pulumi.Output[str] | None

    def __init__(self, name: str, args: RegistryArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("aksgpu:index:Registry", name, None, opts)
        spec = args.spec
        self.registry_id = None
        self.login_server = None
        if spec.mode == "create":
            policies: dict[str, object] = {}
            if spec.untagged_retention_days is not None:
                policies["retention_policy"] = {"days": spec.untagged_retention_days, "status": "enabled"}
            if not spec.public_network_access:
                # Azure allows turning export off only on a registry without public access.
                policies["export_policy"] = {"status": "disabled"}
            registry = containerregistry.Registry(
                f"{name}-acr",
                registry_name=spec.name or default_registry_name(args.cluster_name),
                resource_group_name=args.resource_group_name,
                location=args.location,
                sku={"name": spec.sku},
                admin_user_enabled=False,
                anonymous_pull_enabled=False,
                public_network_access="Enabled" if spec.public_network_access else "Disabled",
                policies=policies or None,
                zone_redundancy="Enabled" if spec.zone_redundancy else "Disabled",
                tags=args.tags,
                opts=pulumi.ResourceOptions(parent=self, protect=args.protect),
            )
            self.registry_id = registry.id
            self.login_server = registry.login_server
            if not spec.public_network_access:
                self._private_endpoint(name, args, registry.id)
            if args.workspace_id is not None:
                monitor.DiagnosticSetting(
                    f"{name}-logs",
                    name="aksgpu-registry",
                    resource_uri=registry.id,
                    workspace_id=args.workspace_id,
                    logs=[{"category": category, "enabled": True} for category in REGISTRY_LOG_CATEGORIES],
                    metrics=[{"category": "AllMetrics", "enabled": True}],
                    opts=pulumi.ResourceOptions(parent=self),
                )
        elif spec.mode == "fleet":
            self.registry_id = pulumi.Output.from_input(args.fleet_registry_id)  # type: ignore[arg-type]  # set when mode is fleet
            self.login_server = pulumi.Output.from_input(args.fleet_login_server)  # type: ignore[arg-type]  # set when mode is fleet
            if not spec.public_network_access:
                self._private_endpoint(name, args, self.registry_id)
        elif spec.mode == "existing":
            self.registry_id = pulumi.Output.from_input(spec.id)  # type: ignore[arg-type]  # the spec requires id in existing mode
            # An existing registry's login server is its lowercase name plus azurecr.io (Azure public
            # cloud; sovereign clouds use other suffixes).
            self.login_server = pulumi.Output.from_input(f"{spec.id.rsplit('/', 1)[-1].lower()}.azurecr.io")  # type: ignore[union-attr]  # the spec requires id in existing mode
        if self.registry_id is not None:
            assign_role(
                f"{name}-acrpull",
                role="AcrPull",
                principal_id=args.kubelet_principal_id,
                principal_type="ServicePrincipal",
                scope=self.registry_id,
                subscription_id=args.subscription_id,
                parent=self,
            )
        self.register_outputs({"registryId": self.registry_id, "loginServer": self.login_server})

    def _private_endpoint(self, name: str, args: RegistryArgs, registry_id: pulumi.Input[str]) -> None:
        """A private endpoint in the cluster's VNet and the DNS zone that makes the registry's name
        resolve to it there (a geo-replicated registry's endpoint also resolves its replicas)."""
        subnet_id = pulumi.Output.from_input(args.subnet_ids[args.spec.private_endpoint_subnet or args.node_subnet])
        child = pulumi.ResourceOptions(parent=self)
        zone_id: pulumi.Input[str]
        if args.spec.private_dns_zone_id is not None:
            zone_id = args.spec.private_dns_zone_id  # a hub's zone, linked to the VNet by its owners
        else:
            zone = privatedns.PrivateZone(
                f"{name}-dns", private_zone_name=REGISTRY_PRIVATE_DNS_ZONE,
                resource_group_name=args.resource_group_name,
                location="global", tags=args.tags, opts=child)
            privatedns.VirtualNetworkLink(
                f"{name}-dns-link", private_zone_name=zone.name, resource_group_name=args.resource_group_name,
                virtual_network_link_name=f"{args.cluster_name}-vnet", location="global", registration_enabled=False,
                # The VNet is the subnet's parent: its ID is the subnet's up to /subnets/.
                virtual_network={"id": subnet_id.apply(lambda subnet: subnet.rsplit("/subnets/", 1)[0])},
                tags=args.tags, opts=child)
            zone_id = zone.id
        endpoint = azure_network.PrivateEndpoint(
            f"{name}-endpoint", private_endpoint_name=names.registry_private_endpoint(args.cluster_name),
            resource_group_name=args.resource_group_name, location=args.location, subnet={"id": subnet_id},
            private_link_service_connections=[{"name": "registry", "private_link_service_id": registry_id,
                                               "group_ids": [REGISTRY_GROUP_ID]}],
            tags=args.tags, opts=child)
        azure_network.PrivateDnsZoneGroup(
            f"{name}-endpoint-dns", private_dns_zone_group_name="default", private_endpoint_name=endpoint.name,
            resource_group_name=args.resource_group_name,
            private_dns_zone_configs=[{"name": "registry", "private_dns_zone_id": zone_id}], opts=child)
