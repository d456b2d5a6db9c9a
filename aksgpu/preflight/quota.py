"""The vCPU quota a cluster needs: per VM family in its region, at min scale and at full scale
with upgrade surge, plus the regional total and the regional spot counter, with the `az` commands
that show current usage and request more (data/azure_quota.yaml)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from aksgpu import catalog
from aksgpu.spec import ClusterSpec

# The counter of a size whose family aksgpu's catalog does not know (no command can name it).
UNKNOWN_FAMILY = "unknown family of {}"


@dataclass
class QuotaNeed:
    """vCPUs one quota counter must allow. family None: a size not in aksgpu's table (unknown family)."""

    counter: str
    region: str
    vcpus_min: int = 0
    vcpus_max: int = 0
    sizes: set[str] = field(default_factory=set)
    unknown_sizes: set[str] = field(default_factory=set)

    def to_json(self) -> dict:
        return {"counter": self.counter, "region": self.region, "vcpusMin": self.vcpus_min,
                "vcpusMax": self.vcpus_max, "sizes": sorted(self.sizes), "unknownSizes": sorted(self.unknown_sizes)}


def quota_needs(spec: ClusterSpec) -> list[QuotaNeed]:
    """One need per VM family of the regular pools, one for the regional spot counter (spot pools),
    and the regional total of regular vCPUs; full scale includes each AgentPool's upgrade surge
    (PoolBase.node_range)."""
    table = catalog.load("azure_quota")
    needs: dict[str, QuotaNeed] = {}
    regional = QuotaNeed(table["regionalCounter"], spec.location)
    for _, pool in spec.all_pools:
        size = catalog.vm_size(pool.vm_size)
        low, high = pool.node_range
        spot = pool.is_spot
        if size is None:
            regional.unknown_sizes.add(pool.vm_size)
            continue
        counter = table["spotCounter"] if spot else size.quota_family or UNKNOWN_FAMILY.format(pool.vm_size)
        need = needs.setdefault(counter, QuotaNeed(counter, spec.location))
        for target in (need, regional) if not spot else (need,):
            target.vcpus_min += low * size.vcpus
            target.vcpus_max += high * size.vcpus
            target.sizes.add(pool.vm_size)
    return sorted(needs.values(), key=lambda need: need.counter.lower()) + [regional]


def known(need: QuotaNeed) -> bool:
    return not need.counter.startswith(UNKNOWN_FAMILY.format(""))


def usage_command(needs: list[QuotaNeed]) -> str:
    """The `az` command that shows the current usage and limit of every counter the needs name
    (JMESPath raw strings in single quotes; the query is in double quotes for the shell)."""
    counters = ", ".join("'" + need.counter.replace("'", "\\'") + "'" for need in needs if known(need))
    return catalog.load("azure_quota")["usageCommand"].format(region=needs[0].region, counters=counters)


def request_command(need: QuotaNeed) -> str | None:
    """The `az quota` command that asks for the full-scale limit (family names with spaces quoted
    for the shell); None for a size whose family is unknown: find it with `az vm list-skus`."""
    if not known(need):
        return None
    table = catalog.load("azure_quota")
    resource_type = "lowPriority" if need.counter == table["spotCounter"] else "dedicated"
    return table["requestCommand"].format(family=shlex.quote(need.counter), region=need.region,
                                          vcpus=need.vcpus_max, resource_type=resource_type)
