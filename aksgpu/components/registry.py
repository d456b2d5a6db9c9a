"""Registry: the container registry the nodes pull images from."""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
from pulumi_azure_native import containerregistry

from aksgpu.components.roles import assign_role
from aksgpu.components.spec import Registry as RegistrySpec
from aksgpu.components.spec import default_registry_name


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


class Registry(pulumi.ComponentResource):
    """Creates an ACR (admin user off) or attaches an existing one; either way the kubelet
    identity gets AcrPull on it."""

    registry_id: pulumi.Output[str] | None
    login_server: pulumi.Output[str] | None

    def __init__(self, name: str, args: RegistryArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("aksgpu:index:Registry", name, None, opts)
        spec = args.spec
        self.registry_id = None
        self.login_server = None
        if spec.mode == "create":
            registry = containerregistry.Registry(
                f"{name}-acr",
                registry_name=spec.name or default_registry_name(args.cluster_name),
                resource_group_name=args.resource_group_name,
                location=args.location,
                sku={"name": spec.sku},
                admin_user_enabled=False,
                zone_redundancy="Enabled" if spec.zone_redundancy else "Disabled",
                tags=args.tags,
                opts=pulumi.ResourceOptions(parent=self, protect=args.protect),
            )
            self.registry_id = registry.id
            self.login_server = registry.login_server
        elif spec.mode == "existing":
            self.registry_id = pulumi.Output.from_input(spec.id)
            # An existing registry's login server is its lowercase name plus azurecr.io (Azure public
            # cloud; sovereign clouds use other suffixes).
            self.login_server = pulumi.Output.from_input(f"{spec.id.rsplit('/', 1)[-1].lower()}.azurecr.io")
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
