"""Networking: CNI plugin, dataplane, policy, address ranges, outbound, and the VNet."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BeforeValidator, Field

from aksgpu import catalog

from aksgpu.spec import names as azure_names
from aksgpu.spec.base import Cidr, Ipv4, Issue, SpecModel, network
from aksgpu.spec.resource_ids import check_id

if TYPE_CHECKING:
    from aksgpu.spec import ClusterSpec
    from aksgpu.spec.pools import PoolBase

SUBNET_TYPE = "Microsoft.Network/virtualNetworks/subnets"


class Subnet(SpecModel):
    """A subnet: a CIDR aksgpu creates (vnet.mode create) or an existing subnet's ID."""

    name: str = Field(min_length=1, max_length=80)
    """Name of the subnet, unique; nodeSubnet, podSubnet, the pools' subnet and podSubnet, and apiServer.subnet refer to it. A subnet aksgpu creates (vnet.mode create) gets this name in Azure: 1-80 letters, digits, '_', '.' or '-', starting with a letter or digit and ending with a letter, digit or '_'."""
    cidr: Cidr | None = None
    """IPv4 range of a subnet aksgpu creates (vnet.mode create): inside addressSpace, overlapping no other subnet, and large enough for its pools' nodes (and, with plugin azure, their pods) at full scale with upgrade surge."""
    id: str | None = None
    """Resource ID of an existing subnet (vnet.mode existing only): /subscriptions/<subscription GUID>/resourceGroups/<group>/providers/Microsoft.Network/virtualNetworks/<vnet>/subnets/<name>."""


# aksgpu's inbound NSG rules take priorities 1000, 1010, ... (Azure allows 100-4096).
MAX_INBOUND_RULES = 100
# A port or port range as an NSG rule takes it: "443", "8000-8100" (1-65535).
PORTS = re.compile(r"^([1-9][0-9]{0,4})(-([1-9][0-9]{0,4}))?$")
# A port as a number (443) or as text ("443", "8000-8100", "*"): one type, so a wrong value gets
# one message (a union would report it once per member).
Port = Annotated[str, BeforeValidator(lambda value: str(value) if type(value) is int else value,
                                      json_schema_input_type=str | int)]
# An NSG rule's source: a CIDR or address, or a service tag ("Internet", "AzureFrontDoor.Backend").
SERVICE_TAG = re.compile(r"^[A-Za-z][A-Za-z0-9]*(\.[A-Za-z0-9]+)?$")


class InboundRule(SpecModel):
    """Traffic from outside the VNet that the node and pod subnets' NSGs let in."""

    name: Annotated[str, azure_names.named("Microsoft.Network/networkSecurityGroups/securityRules", "rename the rule")]
    """Name of the NSG rule: 1-80 letters, digits, '_', '.' or '-', starting with a letter or digit and ending with a letter, digit or '_'."""
    ports: list[Port] = Field(min_length=1)
    """Destination ports or ranges, e.g. [443] or ["8000-8100"]; "*" for every port."""
    sources: list[str] = Field(min_length=1)
    """Where the traffic may come from: IPv4 or IPv6 CIDRs and addresses, or one Azure service tag on its own (e.g. ["AzureFrontDoor.Backend"] or ["Internet"]): Azure takes a tag only as a rule's single source."""
    protocol: Literal["Tcp", "Udp", "*"] = "Tcp"
    """The protocol allowed."""


class Vnet(SpecModel):
    """Where nodes live. managed: AKS creates the VNet; create: aksgpu does; existing: yours."""

    mode: Literal["managed", "create", "existing"] = "managed"
    """managed: AKS creates the VNet and its subnets; create: aksgpu creates the VNet and the listed subnets; existing: the listed subnets already exist, given by resource ID."""
    name: str | None = None
    """Name of the VNet aksgpu creates (mode create): 2-64 letters, digits, '_', '.' or '-', starting with a letter or digit and ending with a letter, digit or '_'. None: "<cluster name>-vnet"."""
    address_space: list[Cidr] = Field(default_factory=lambda: ["10.224.0.0/12"])
    """IPv4 ranges of the VNet aksgpu creates (mode create); every subnet must lie inside them, and they must not overlap the pod or service range or a range AKS reserves."""
    subnets: list[Subnet] = Field(default_factory=list)
    """The subnets of mode create (name and cidr) or mode existing (name and id). Must be empty with mode managed."""
    node_subnet: str = "nodes"
    """Name of the subnet for the nodes of every pool that sets no subnet of its own (modes create and existing)."""
    pod_subnet: str | None = None
    """Name of the subnet pods take IPs from, for every pool that sets no podSubnet of its own (plugin azure only). None: pods take IPs from the node subnet."""
    inbound: list[InboundRule] = Field(default_factory=list)
    """Traffic from outside the VNet to let in (mode create). aksgpu gives every subnet it creates a network security group (policy vnet-subnet-nsg) whose default rules allow traffic within the VNet and from Azure's load balancer probes and deny the rest inbound; a public LoadBalancer service's port must be listed here."""

    def subnet(self, name: str) -> Subnet | None:
        return next((s for s in self.subnets if s.name == name), None)


class Network(SpecModel):
    """CNI and addressing. Plugins: azure-overlay (pods on a private overlay CIDR), azure (pods
    get VNet IPs), kubenet (retiring in 2028)."""

    plugin: Literal["azure-overlay", "azure", "kubenet"] = "azure-overlay"
    """CNI plugin: azure-overlay (Azure CNI Overlay: pods get IPs from podCidr), azure (pods get VNet IPs from the node subnet or a pod subnet) or kubenet (AKS stops supporting it on 2028-03-31)."""
    dataplane: Literal["azure", "cilium"] = "azure"
    """Network dataplane: azure, or cilium (Azure CNI powered by Cilium, which needs plugin azure or azure-overlay)."""
    policy: Literal["none", "calico", "azure", "cilium"] = "none"
    """Network policy engine: none, calico, azure (Azure Network Policy Manager: not with kubenet, up to 250 nodes) or cilium (needs dataplane cilium, and dataplane cilium takes only cilium or none)."""
    pod_cidr: Cidr | None = None
    """Pod IP range for azure-overlay and kubenet (not for plugin azure). None: "10.244.0.0/16". Each node takes a /24 of it, so it must fit every node with upgrade surge."""
    service_cidr: Cidr = "10.0.0.0/16"
    """IP range of Kubernetes services: smaller than a /12, not overlapping the pod range, the VNet or a range AKS reserves."""
    dns_service_ip: Ipv4 = "10.0.0.10"
    """IP of the cluster DNS service: inside serviceCidr, and not its network, first or broadcast address (conventionally the .10)."""
    outbound: Literal["loadBalancer", "managedNATGateway", "userAssignedNATGateway"] = "loadBalancer"
    """How nodes reach the internet: loadBalancer (AKS's Standard load balancer), managedNATGateway (a NAT gateway AKS creates; needs vnet.mode managed) or userAssignedNATGateway (a NAT gateway on your node subnets; aksgpu creates it with vnet.mode create)."""
    outbound_ips: int = Field(default=1, ge=1, le=100)
    """Number of public outbound IPs of the load balancer or NAT gateway, 1-100 (a managed NAT gateway takes at most 16)."""
    nat_idle_timeout_minutes: int = Field(default=4, ge=4, le=120)
    """Idle timeout of the NAT gateway's outbound connections in minutes, 4-120 (managedNATGateway and userAssignedNATGateway)."""
    vnet: Vnet = Vnet()
    """The VNet the nodes live in: AKS-managed, created by aksgpu, or existing."""

    @property
    def effective_pod_cidr(self) -> str | None:
        if self.plugin == "azure":
            return None
        return self.pod_cidr or "10.244.0.0/16"

    def default_max_pods(self, pool: PoolBase) -> int:
        """AKS's default maxPods for a pool under this plugin."""
        table = catalog.limit("defaultMaxPods")
        if self.plugin == "azure" and (pool.pod_subnet or self.vnet.pod_subnet):
            return table["azure-podsubnet"]
        return table[self.plugin]


# --- rules that span fields -----------------------------------------------------------------


def check_network(spec: ClusterSpec) -> Iterator[Issue]:
    net = spec.network
    yield from _check_plugin_combinations(net, spec.total_max_nodes)
    yield from _check_ranges(net)
    yield from _check_vnet(spec)
    yield from _check_inbound(net.vnet)
    yield from _check_outbound(net)
    yield from _check_capacity(spec)


def _is_address(text: str) -> bool:
    """An IPv4 or IPv6 address or CIDR (an NSG rule takes both)."""
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return False
    return True


def _check_inbound(vnet: Vnet) -> Iterator[Issue]:
    if vnet.inbound and vnet.mode != "create":
        yield Issue("network.vnet.inbound", [rule.name for rule in vnet.inbound],
                    "aksgpu puts network security groups only on the subnets it creates",
                    "set the rules on your own subnets' NSGs, or use vnet.mode: create")
    if len(vnet.inbound) > MAX_INBOUND_RULES:
        yield Issue("network.vnet.inbound", len(vnet.inbound), f"aksgpu numbers these rules within one block of "
                    f"priorities, which holds {MAX_INBOUND_RULES}", "merge rules (each takes several ports and sources)")
    seen: set[str] = set()
    for index, rule in enumerate(vnet.inbound):
        path = f"network.vnet.inbound[{index}]"
        if rule.name.lower() in seen:
            yield Issue(f"{path}.name", rule.name, "NSG rule names are unique", "rename one of them")
        seen.add(rule.name.lower())
        for p_index, ports in enumerate(rule.ports):
            match = PORTS.fullmatch(ports)
            low, high = (int(match.group(1)), int(match.group(3) or match.group(1))) if match else (0, 0)
            if ports != "*" and (not match or not 1 <= low <= high <= 65535):
                yield Issue(f"{path}.ports[{p_index}]", ports, "must be a port or a range of ports, 1-65535, or \"*\"",
                            'write it like 443 or "8000-8100"')
        tags = [source for source in rule.sources if not _is_address(source)]
        for s_index, source in enumerate(rule.sources):
            if not (_is_address(source) or SERVICE_TAG.fullmatch(source)):
                yield Issue(f"{path}.sources[{s_index}]", source, "must be a CIDR, an address or an Azure service tag",
                            'write it like "203.0.113.0/24" or "AzureFrontDoor.Backend"')
        if tags and len(rule.sources) > 1:
            yield Issue(f"{path}.sources", rule.sources, "Azure takes a service tag only as a rule's one source",
                        "give the tag a rule of its own")


def _check_plugin_combinations(net: Network, total_nodes: int) -> Iterator[Issue]:
    if net.pod_cidr is not None and net.plugin == "azure":
        yield Issue("network.podCidr", net.pod_cidr,
                    "a pod CIDR is only used by kubenet and azure-overlay; with plugin azure pods take VNet IPs",
                    "remove podCidr, or use plugin: azure-overlay")
    if net.policy == "cilium" and net.dataplane != "cilium":
        yield Issue("network.policy", "cilium", "cilium network policy needs the cilium dataplane",
                    "set network.dataplane: cilium")
    if net.dataplane == "cilium" and net.plugin == "kubenet":
        yield Issue("network.dataplane", "cilium", "the cilium dataplane needs Azure CNI (azure or azure-overlay)",
                    "set network.plugin: azure-overlay")
    if net.dataplane == "cilium" and net.policy not in ("cilium", "none"):
        yield Issue("network.policy", net.policy, "with the cilium dataplane, Cilium enforces network policy",
                    "set network.policy: cilium")
    if net.plugin == "kubenet" and net.policy == "azure":
        yield Issue("network.policy", "azure", "Azure network policy manager needs Azure CNI, not kubenet",
                    "use policy: calico, or plugin: azure-overlay")
    if net.plugin == "kubenet":
        yield Issue("network.plugin", "kubenet",
                    f"AKS stops supporting kubenet on {catalog.limit('kubenetRetirement')}",
                    "use plugin: azure-overlay (same pod CIDR model, supported)", "warning")
    if net.policy == "azure" and total_nodes > catalog.limit("azureNpmMaxNodes"):
        yield Issue("network.policy", "azure",
                    f"Azure network policy manager supports up to {catalog.limit('azureNpmMaxNodes')} nodes; "
                    f"this cluster can reach {total_nodes}", "use dataplane: cilium with policy: cilium", "warning")


def _check_ranges(net: Network) -> Iterator[Issue]:
    service = network(net.service_cidr)
    if service.prefixlen < catalog.limit("largestServiceCidrPrefix"):
        yield Issue("network.serviceCidr", net.service_cidr, "the service CIDR must be smaller than a /12",
                    'use a /16 such as "10.0.0.0/16"')
    dns = ipaddress.IPv4Address(net.dns_service_ip)
    if dns not in service:
        yield Issue("network.dnsServiceIp", net.dns_service_ip,
                    f"must lie inside the service CIDR {net.service_cidr}",
                    f'use the .10 address of the service range, e.g. "{service.network_address + 10}"')
    elif dns in (service.network_address, service.network_address + 1, service.broadcast_address):
        yield Issue("network.dnsServiceIp", net.dns_service_ip,
                    "cannot be the network, broadcast or first address (the kubernetes service takes .1)",
                    f'use "{service.network_address + 10}"')
    named = [("network.serviceCidr", net.service_cidr)]
    if net.effective_pod_cidr:
        named.append(("network.podCidr", net.effective_pod_cidr))
    if net.vnet.mode == "create":
        named += [(f"network.vnet.addressSpace[{i}]", c) for i, c in enumerate(net.vnet.address_space)]
    for path, cidr in named:
        for reserved in catalog.limit("reservedRanges"):
            if network(cidr).overlaps(network(reserved)):
                yield Issue(path, cidr, f"overlaps {reserved}, a range AKS reserves",
                            "choose a range inside 10.0.0.0/8 that avoids it")
    for i, (path_a, a) in enumerate(named):
        for path_b, b in named[i + 1:]:
            if path_a.startswith("network.vnet") and path_b.startswith("network.vnet"):
                continue
            if network(a).overlaps(network(b)):
                yield Issue(path_b, b, f"overlaps {path_a} ({a}); pod, service and VNet ranges must be disjoint",
                            "move one of them to a range that does not overlap")


def _check_vnet(spec: ClusterSpec) -> Iterator[Issue]:
    vnet = spec.network.vnet
    pools = spec.all_pools
    api_subnet = spec.control_plane.api_server.subnet
    if vnet.mode == "managed":
        if vnet.subnets:
            yield Issue("network.vnet.subnets", [s.name for s in vnet.subnets],
                        "AKS creates the subnets of a managed VNet", "remove subnets, or set vnet.mode: create")
        for path, pool in pools:
            for field in ("subnet", "podSubnet"):
                value = pool.subnet if field == "subnet" else pool.pod_subnet
                if value is not None:
                    yield Issue(f"{path}.{field}", value, "pools cannot choose subnets in an AKS-managed VNet",
                                "remove it, or set network.vnet.mode: create")
        return
    if vnet.mode == "create" and vnet.name is not None:
        yield from azure_names.check_name("network.vnet.name", vnet.name, "Microsoft.Network/virtualNetworks",
                                          'rename the VNet, or leave name out for "<cluster name>-vnet"')
    names = [s.name for s in vnet.subnets]
    for index, subnet in enumerate(vnet.subnets):
        path = f"network.vnet.subnets[{index}]"
        if names.index(subnet.name) != index:
            yield Issue(f"{path}.name", subnet.name, "subnet names must be unique", "rename one of them")
        if vnet.mode == "create":
            yield from azure_names.check_name(f"{path}.name", subnet.name, SUBNET_TYPE,
                                              "rename the subnet (and each field that names it)")
            if subnet.id is not None:
                yield Issue(f"{path}.id", subnet.id, "with vnet.mode create aksgpu creates the subnet",
                            "remove id and give cidr, or set vnet.mode: existing")
            if subnet.cidr is None:
                yield Issue(f"{path}.cidr", None, "a subnet aksgpu creates needs a CIDR",
                            'add cidr, e.g. "10.224.0.0/16"')
            elif not any(network(subnet.cidr).subnet_of(network(space)) for space in vnet.address_space):
                yield Issue(f"{path}.cidr", subnet.cidr, "must lie inside the VNet's addressSpace",
                            f"choose a range inside {', '.join(vnet.address_space)}")
        else:
            if subnet.cidr is not None:
                yield Issue(f"{path}.cidr", subnet.cidr, "an existing subnet's range comes from Azure",
                            "remove cidr and give the subnet's resource id")
            yield from check_id(f"{path}.id", subnet.id, SUBNET_TYPE)
    cidrs = [(i, s) for i, s in enumerate(vnet.subnets) if s.cidr]
    for pos, (_i, a) in enumerate(cidrs):
        for j, b in cidrs[pos + 1:]:
            if network(a.cidr).overlaps(network(b.cidr)):  # type: ignore[arg-type]  # cidrs holds subnets with a cidr
                yield Issue(f"network.vnet.subnets[{j}].cidr", b.cidr,
                            f"overlaps subnet {a.name} ({a.cidr})", "give each subnet its own range")
    references = [("network.vnet.nodeSubnet", vnet.node_subnet), ("network.vnet.podSubnet", vnet.pod_subnet)]
    references.append(("controlPlane.apiServer.subnet", api_subnet))
    for path, pool in pools:
        references += [(f"{path}.subnet", pool.subnet), (f"{path}.podSubnet", pool.pod_subnet)]
    for path, name in references:
        if name is not None and name not in names:
            yield Issue(path, name, "must name a subnet in network.vnet.subnets",
                        f"use one of: {', '.join(names) or '(none declared)'}")
    pod_subnets = {vnet.pod_subnet} | {pool.pod_subnet for _, pool in pools}
    if (pod_subnets - {None}) and spec.network.plugin != "azure":
        yield Issue("network.plugin", spec.network.plugin, "pod subnets are used only by plugin azure",
                    "remove the pod subnets, or set plugin: azure")
    node_subnets = {pool.subnet or vnet.node_subnet for _, pool in pools}
    for name in sorted(node_subnets & (pod_subnets | {api_subnet})):
        yield Issue("network.vnet.subnets", name,
                    "a node subnet cannot also be a pod subnet or the API server subnet", "give each role its own subnet")


def _check_outbound(net: Network) -> Iterator[Issue]:
    if net.outbound == "managedNATGateway":
        if net.vnet.mode != "managed":
            yield Issue("network.outbound", net.outbound, "a managed NAT gateway needs an AKS-managed VNet",
                        "set vnet.mode: managed, or use outbound: userAssignedNATGateway")
        if net.outbound_ips > 16:
            yield Issue("network.outboundIps", net.outbound_ips, "a managed NAT gateway takes 1 to 16 IPs",
                        "set outboundIps to 16 or fewer")
    if net.outbound == "userAssignedNATGateway" and net.vnet.mode == "managed":
        yield Issue("network.outbound", net.outbound,
                    "a user-assigned NAT gateway is attached to your own node subnets",
                    "set vnet.mode: create (aksgpu creates and attaches it) or existing")
    if net.outbound == "userAssignedNATGateway" and net.vnet.mode == "existing":
        yield Issue("network.outbound", net.outbound,
                    "aksgpu cannot see your existing subnets; AKS fails if no NAT gateway is attached to them",
                    "make sure a NAT gateway is attached to every node subnet", "warning")


@dataclass(frozen=True)
class AddressRange:
    """One address range of the cluster and what its pools take from it at min and full scale
    (with upgrade surge). unit: "addresses" (a subnet) or "nodes" (a pod CIDR, one block each);
    capacity None: the range is not aksgpu's to see (an existing or AKS-managed subnet)."""

    name: str
    path: str
    cidr: str | None
    unit: str
    capacity: int | None
    at_min: int
    at_max: int
    holds: str


def address_plan(spec: ClusterSpec) -> list[AddressRange]:
    """Every range the cluster's nodes and pods take addresses from, with the demand at min and at
    full scale with upgrade surge: node subnets (nodes, and with plugin azure the pods that share
    them), pod subnets (each node's maxPods), and the overlay or kubenet pod CIDR (a block per node)."""
    net = spec.network
    reserved = catalog.limit("subnetReservedAddresses")
    demand: dict[str, list[int]] = {}
    holds: dict[str, set[str]] = {}
    nodes_min = nodes_max = 0
    for _, pool in spec.all_pools:
        low, high = pool.node_range
        nodes_min, nodes_max = nodes_min + low, nodes_max + high
        pods = pool.max_pods or net.default_max_pods(pool)
        node_subnet = pool.subnet or net.vnet.node_subnet
        pod_subnet = (pool.pod_subnet or net.vnet.pod_subnet) if net.plugin == "azure" else None
        per_node = 1 + (pods if net.plugin == "azure" and pod_subnet is None else 0)
        for name, per, what in ((node_subnet, per_node, "nodes" + (" and pods" if per_node > 1 else "")),
                                (pod_subnet, pods, "pods")):
            if name is None:
                continue
            entry = demand.setdefault(name, [0, 0])
            entry[0] += low * per
            entry[1] += high * per
            holds.setdefault(name, set()).add(what)
    ranges: list[AddressRange] = []
    subnets = {subnet.name: (index, subnet) for index, subnet in enumerate(net.vnet.subnets)}
    for name, (low, high) in sorted(demand.items()):
        index, subnet = subnets.get(name, (None, None))
        cidr = subnet.cidr if subnet is not None else None
        capacity = network(cidr).num_addresses - reserved if cidr else None
        path = f"network.vnet.subnets[{index}].cidr" if index is not None else "network.vnet"
        ranges.append(AddressRange(f"subnet {name}", path, cidr, "addresses", capacity, low, high,
                                   ", ".join(sorted(holds[name]))))
    pod_cidr = net.effective_pod_cidr
    if pod_cidr:
        block = catalog.limit("overlayPodBlockPrefix")
        capacity = 2 ** max(block - network(pod_cidr).prefixlen, 0)
        ranges.append(AddressRange("pod CIDR", "network.podCidr", pod_cidr, "nodes", capacity, nodes_min, nodes_max,
                                   f"a /{block} per node"))
    return ranges


def _check_capacity(spec: ClusterSpec) -> Iterator[Issue]:
    """Enough addresses at full scale with upgrade surge in every range aksgpu can see."""
    net = spec.network
    for found in address_plan(spec):
        if found.capacity is None or found.at_max <= found.capacity:
            continue
        if found.unit == "nodes":
            block = catalog.limit("overlayPodBlockPrefix")
            yield Issue(found.path, found.cidr, f"each node takes a /{block} of the pod CIDR; this one fits "
                        f"{found.capacity} nodes and the cluster can reach {found.at_max} with upgrade surge",
                        "use a larger pod CIDR, e.g. a /12")
        else:
            yield Issue(found.path, found.cidr, f"the pools on this subnet ({found.holds}) can need {found.at_max} "
                        f"addresses at full scale with upgrade surge; it has {found.capacity}",
                        "use a larger subnet, or spread pools over subnets")
    api_subnet = spec.control_plane.api_server.subnet
    for index, subnet in enumerate(net.vnet.subnets):
        if subnet.name == api_subnet and subnet.cidr:
            if network(subnet.cidr).prefixlen > catalog.limit("minApiServerSubnetPrefix"):
                yield Issue(f"network.vnet.subnets[{index}].cidr", subnet.cidr,
                            "the API server subnet must be a /28 or larger", "use a /28")
