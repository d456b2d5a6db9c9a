"""Network: the VNet and subnets the cluster's nodes live in, and a NAT gateway for egress."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi
from pulumi_azure_native import network as azure_network

from aksgpu.spec import Network as NetworkSpec
from aksgpu.spec import names

AKS_DELEGATION = "Microsoft.ContainerService/managedClusters"
# Priorities of the inbound rules aksgpu adds (network.vnet.inbound): 1000, 1010, ... Azure allows
# 100-4096, and leaves room below and above for rules a team adds itself.
INBOUND_PRIORITY = 1000


@dataclass
class NetworkArgs:
    spec: NetworkSpec
    cluster_name: str
    location: str
    resource_group_name: pulumi.Input[str]
    # Subnets that hold nodes (they get the NAT gateway); the API server subnet and the pod subnets
    # (delegated to AKS).
    node_subnets: list[str] = field(default_factory=list)
    api_server_subnet: str | None = None
    # A public API server's endpoint in the API server subnet takes traffic from outside the VNet,
    # which an NSG's default rules would deny: that subnet gets an NSG only for a private one.
    api_server_private: bool = False
    pod_subnets: list[str] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)


class Network(pulumi.ComponentResource):
    """Creates the VNet and subnets (vnet.mode create), or passes through existing subnet IDs.

    With an AKS-managed VNet it declares nothing and `subnet_ids` is empty.
    """

    subnet_ids: dict[str, pulumi.Output[str]]
    vnet_id: pulumi.Output[str] | None

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("aksgpu:index:Network", name, None, opts)
        vnet = args.spec.vnet
        self.subnet_ids = {}
        self.vnet_id = None
        if vnet.mode == "existing":
            self.subnet_ids = {s.name: pulumi.Output.from_input(s.id) for s in vnet.subnets if s.id}
        elif vnet.mode == "create":
            self._create(name, args)
        self.register_outputs({"subnetIds": self.subnet_ids, "vnetId": self.vnet_id})

    def _create(self, name: str, args: NetworkArgs) -> None:
        vnet_spec = args.spec.vnet
        child = pulumi.ResourceOptions(parent=self)
        vnet_name = vnet_spec.name or names.vnet(args.cluster_name)
        virtual_network = azure_network.VirtualNetwork(
            f"{name}-vnet",
            virtual_network_name=vnet_name,
            resource_group_name=args.resource_group_name,
            location=args.location,
            address_space={"address_prefixes": list(vnet_spec.address_space)},
            tags=args.tags,
            # Subnets are separate resources; an inline list would fight them on every update.
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["subnets"]),
        )
        self.vnet_id = virtual_network.id
        nat_gateway = self._nat_gateway(name, args) if args.spec.outbound == "userAssignedNATGateway" else None
        previous: pulumi.Resource | None = None
        for subnet in vnet_spec.subnets:
            props: dict[str, Any] = {}
            # AKS requires the API server subnet delegated to it, and adds the same delegation to a
            # pod subnet itself when the cluster starts using it; stated here, a refresh finds nothing
            # to change and the next `up` does not try to remove it (MicrosoftDocs/azure-docs#103167,
            # Azure/ARO-HCP#471: Microsoft's own AKS infrastructure declares it up front).
            if subnet.name == args.api_server_subnet:
                props["delegations"] = [{"name": "aks-apiserver", "service_name": AKS_DELEGATION}]
            elif subnet.name in args.pod_subnets:
                props["delegations"] = [{"name": "aks-pods", "service_name": AKS_DELEGATION}]
            if nat_gateway is not None and subnet.name in args.node_subnets:
                props["nat_gateway"] = {"id": nat_gateway.id}
            if subnet.name != args.api_server_subnet or args.api_server_private:
                props["network_security_group"] = {"id": self._security_group(name, args, subnet.name).id}
            created = azure_network.Subnet(
                f"{name}-subnet-{subnet.name}",
                subnet_name=subnet.name,
                virtual_network_name=virtual_network.name,
                resource_group_name=args.resource_group_name,
                address_prefix=subnet.cidr,
                # A private subnet (policy vnet-private-subnet): nodes leave through the cluster's
                # explicit outbound (load balancer rules, NAT gateway), never Azure's implicit IP.
                default_outbound_access=False,
                **props,
                # Azure rejects concurrent writes to subnets of one VNet (AnotherOperationInProgress).
                opts=pulumi.ResourceOptions.merge(child,
                                                  pulumi.ResourceOptions(depends_on=[previous] if previous else [])),
            )
            self.subnet_ids[subnet.name] = created.id
            previous = created

    def _security_group(self, name: str, args: NetworkArgs, subnet: str) -> azure_network.NetworkSecurityGroup:
        """The subnet's NSG (policy vnet-subnet-nsg). Azure's default rules allow traffic within the
        VNet and load balancer probes and deny the rest inbound; node and pod subnets also let in
        what network.vnet.inbound lists (a public LoadBalancer service's ports)."""
        receives_traffic = subnet in args.node_subnets or subnet in args.pod_subnets
        rules = [{
            "name": rule.name, "priority": INBOUND_PRIORITY + 10 * index, "direction": "Inbound", "access": "Allow",
            "protocol": rule.protocol, "source_port_range": "*", "destination_address_prefix": "*",
            # One source (a service tag must be alone) as a prefix; several as prefixes.
            **({"source_address_prefix": rule.sources[0]} if len(rule.sources) == 1
               else {"source_address_prefixes": list(rule.sources)}),
            **({"destination_port_range": rule.ports[0]} if len(rule.ports) == 1
               else {"destination_port_ranges": list(rule.ports)}),
        } for index, rule in enumerate(args.spec.vnet.inbound)] if receives_traffic else []
        return azure_network.NetworkSecurityGroup(
            f"{name}-nsg-{subnet}",
            network_security_group_name=names.network_security_group(args.cluster_name, subnet),
            resource_group_name=args.resource_group_name,
            location=args.location,
            security_rules=rules or None,  # type: ignore[arg-type]  # plain dicts for the SDK's Args types
            tags=args.tags,
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _nat_gateway(self, name: str, args: NetworkArgs) -> azure_network.NatGateway:
        child = pulumi.ResourceOptions(parent=self)
        addresses = [
            azure_network.PublicIPAddress(
                f"{name}-nat-ip-{index}",
                public_ip_address_name=names.nat_public_ip(args.cluster_name, index),
                resource_group_name=args.resource_group_name,
                location=args.location,
                sku={"name": "Standard", "tier": "Regional"},
                public_ip_allocation_method="Static",
                public_ip_address_version="IPv4",
                tags=args.tags,
                opts=child,
            )
            for index in range(args.spec.outbound_ips)
        ]
        return azure_network.NatGateway(
            f"{name}-nat",
            nat_gateway_name=names.nat_gateway(args.cluster_name),
            resource_group_name=args.resource_group_name,
            location=args.location,
            sku={"name": "Standard"},
            idle_timeout_in_minutes=args.spec.nat_idle_timeout_minutes,
            public_ip_addresses=[{"id": address.id} for address in addresses],
            tags=args.tags,
            opts=child,
        )
