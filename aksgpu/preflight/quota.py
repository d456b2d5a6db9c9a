"""The vCPU quota a cluster needs: per VM family in its region, at min scale and at full scale
with upgrade surge, plus the regional total and the regional spot counter, with the `az` commands
that show current usage and request more (data/azure_quota.yaml)."""

from __future__ import annotations

from dataclasses import dataclass, field

from aksgpu.components import data
from aksgpu.components.spec import ClusterSpec
from aksgpu.components.spec.base import surge_nodes


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
    and the regional total of regular vCPUs; full scale includes each pool's upgrade surge (spot
    pools get none, as AKS gives them no surge nodes)."""
    table = data.load("azure_quota")
    needs: dict[str, QuotaNeed] = {}
    regional = QuotaNeed(table["regionalCounter"], spec.location)
    for _, pool in spec.all_pools:
        size = data.vm_size(pool.vm_size)
        low = pool.min_nodes * pool.zone_pool_count
        high = pool.max_nodes * pool.zone_pool_count
        spot = pool.is_spot
        if not spot:
            high += surge_nodes(pool.upgrade.max_surge, high)
        if size is None:
            regional.unknown_sizes.add(pool.vm_size)
            continue
        counter = table["spotCounter"] if spot else size.get("quotaFamily") or f"(family of {pool.vm_size})"
        need = needs.setdefault(counter, QuotaNeed(counter, spec.location))
        for target in (need, regional) if not spot else (need,):
            target.vcpus_min += low * size["vcpus"]
            target.vcpus_max += high * size["vcpus"]
            target.sizes.add(pool.vm_size)
    return sorted(needs.values(), key=lambda need: need.counter.lower()) + [regional]


def usage_command(needs: list[QuotaNeed]) -> str:
    """The `az` command that shows the current usage and limit of every counter the needs name."""
    counters = ", ".join(f"'{need.counter}'" for need in needs)
    return data.load("azure_quota")["usageCommand"].format(region=needs[0].region, counters=counters)


def request_command(need: QuotaNeed) -> str:
    """The `az quota` command that asks for the full-scale limit."""
    table = data.load("azure_quota")
    resource_type = "lowPriority" if need.counter == table["spotCounter"] else "dedicated"
    return table["requestCommand"].format(family=need.counter, region=need.region, vcpus=need.vcpus_max,
                                          resource_type=resource_type)
