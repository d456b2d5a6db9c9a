"""The preflight parts of `aksgpu plan`: the vCPU quota to request, the addresses each range
gives at full scale (aksgpu/preflight/, spec/network.py address_plan), and the GPU pools' capacity
(preflight/capacity.py, with the stack's checked-in verdict history, preflight/verdict_history.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aksgpu.spec import ClusterSpec
from aksgpu.spec.base import network
from aksgpu.spec.network import AddressRange, address_plan
from aksgpu.preflight.capacity import PoolCapacity, capacity, capacity_lines
from aksgpu.preflight.quota import quota_needs, request_command, usage_command
from aksgpu.preflight.verdict_history import history_path, read_history


def _history(project_dir: Path | None, stack: str | None) -> tuple[list[dict[str, Any]] | None, str | None]:
    """The stack's verdict history and its path relative to the project (None, None: there is none)."""
    if project_dir is None or stack is None:
        return None, None
    history = read_history(project_dir, stack)
    return history, None if history is None else str(history_path(project_dir, stack).relative_to(project_dir))


@dataclass
class CapacitySection:
    """The capacity section of one cluster's plan: its GPU pools' capacity and the history it read."""

    pools: list[PoolCapacity]
    source: str | None  # the history file, relative to the project (None: anchors only)
    entries: int | None  # the history's entries (None: no history)

    def document(self) -> dict[str, Any]:
        return {"history": self.source, "historyEntries": self.entries, "pools": [p.document for p in self.pools]}

    def lines(self, heading: str = "Capacity of the GPU pools") -> list[str]:
        return capacity_lines(self.pools, self.source, heading)


def capacity_section(spec: ClusterSpec, project_dir: Path | None = None, stack: str | None = None) -> CapacitySection:
    """The cluster's capacity section, from the stack's checked-in verdict history where it has one
    (a UserError naming the file and line when a line of it is not a verdict entry)."""
    history, source = _history(project_dir, stack)
    return CapacitySection(capacity(spec, history), source, None if history is None else len(history))


def preflight_document(spec: ClusterSpec, project_dir: Path | None = None, stack: str | None = None
                       ) -> dict[str, Any]:
    """The `preflight` object of `aksgpu plan --json` (the capacity section reads the stack's history)."""
    needs = quota_needs(spec)
    return {
        "quota": [{**need.to_json(), "requestCommand": request_command(need)} for need in needs],
        "quotaUsageCommand": usage_command(needs),
        "addresses": [_range_json(found) for found in address_plan(spec)],
        "capacity": capacity_section(spec, project_dir, stack).document(),
    }


def preflight_lines(spec: ClusterSpec, project_dir: Path | None = None, stack: str | None = None) -> list[str]:
    """The quota, address and capacity sections of the plan text."""
    needs = quota_needs(spec)
    lines = ["", f"vCPU quota in {spec.location} (min scale / full scale with upgrade surge; request the full-scale "
             "figure before the first `pulumi up`):"]
    width = max(len(need.counter) for need in needs)
    for need in needs:
        sizes = ", ".join(sorted(size.removeprefix("Standard_") for size in need.sizes))
        unknown = f"; not counted, sizes not in aksgpu's table: {', '.join(sorted(need.unknown_sizes))}" \
            if need.unknown_sizes else ""
        label = "regional total of regular vCPUs" if need.counter == needs[-1].counter else sizes
        lines.append(f"  {need.counter.ljust(width)}  {need.vcpus_min:>6} / {need.vcpus_max:<6}  {label}{unknown}")
    lines.append(f"  Usage: {usage_command(needs)}")
    lines.append("  Request: az quota create ... (the full command per counter is in `aksgpu plan --json`, "
                 "preflight.quota[].requestCommand)")
    ranges = address_plan(spec)
    if ranges:
        lines += ["", "Addresses (used at min scale / at full scale with upgrade surge, of the range's capacity):"]
        lines += [_range_line(found) for found in ranges]
    lines.append(f"  service CIDR {spec.network.service_cidr}: {network(spec.network.service_cidr).num_addresses} "
                 "addresses for the cluster's Services (one each; AKS keeps the DNS service's)")
    api = spec.control_plane.api_server
    subnet = spec.network.vnet.subnet(api.subnet) if api.vnet_integration and api.subnet else None
    if subnet is not None and subnet.cidr:
        lines.append(f"  subnet {subnet.name} {subnet.cidr}: the API server's (VNet integration; AKS needs a /28 "
                     "or larger, delegated to it)")
    return lines + capacity_section(spec, project_dir, stack).lines()


def _range_line(found: AddressRange) -> str:
    where = f"{found.name} {found.cidr}" if found.cidr else found.name
    if found.capacity is None:
        return f"  {where}: {found.at_min} / {found.at_max} {found.unit} ({found.holds}); capacity not known to aksgpu"
    free = found.capacity - found.at_max
    state = f"{free} free" if free >= 0 else f"SHORT by {-free}"
    return (f"  {where}: {found.at_min} / {found.at_max} of {found.capacity} {found.unit} ({found.holds}); "
            f"{state} at full scale")


def _range_json(found: AddressRange) -> dict[str, Any]:
    return {"name": found.name, "path": found.path, "cidr": found.cidr, "unit": found.unit,
            "capacity": found.capacity, "atMin": found.at_min, "atMax": found.at_max, "holds": found.holds,
            "freeAtMax": None if found.capacity is None else found.capacity - found.at_max}
