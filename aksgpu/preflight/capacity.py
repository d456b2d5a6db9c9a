"""The capacity of each GPU pool before anyone runs `pulumi up`: whether its capacity reservation
covers maxCount plus surge, where Azure offers the size, the vCPU quota it needs, how long a
scale-out to maxCount takes, and headroom adjusted for how often that size's new nodes fail the
gate. Pure functions over the spec, aksgpu's catalog and a verdict history (a list of the gate's
verdict entries, preflight/verdict_history.py); the decision rules and their sources are in
docs/guides/capacity.md.

Rules:
- Failure rate of a size in a zone: among the distinct nodes of that size (vmSize, or the pool's
  name where an entry lacks vmSize) that a verdict judged, the share that failed: the gate's
  "passed" or "accepting" (an InfiniBand node that passed its check, its cross-node acceptance
  due) against its "failed", the cross-node acceptance's "failed", and the watchdog's failures of a
  node whose check never ran or finished (gate-timeout, gate-unstarted). Each node counts once. A
  "held" node is not a failure: the circuit breaker holds nodes for a systemic fault (a broken
  image or check), not for a bad VM. Entries without a zone count for the size as a whole, which
  stands in for a zone that has no entries of its own.
- Reliability-adjusted headroom: ceil(demand x (1 + rate)). Balloons take the highest rate of the
  pool's zones (a balloon may land in any of them); a zone's reservation takes its zone's rate.
- Scale-out to maxCount: the nodes of one scale-up come up in parallel (deploy_durations.yaml
  scaleOut.parallelNodes), so it takes one node's way: the autoscaler's GPU delay, the provision
  steps, then either the anchors' startup steps and check, or the history's node-to-verdict times
  (secondsToVerdict of gate verdicts of that size: median and 90th percentile).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from aksgpu import catalog
from aksgpu.spec import ClusterSpec
from aksgpu.spec.gpu_health import DEFAULT_CHECK_COMMAND
from aksgpu.spec.gpu_startup import provision_steps, startup_steps
from aksgpu.spec.pools import NodePool
from aksgpu.spec.reservation_checks import REGIONAL, pool_peak, reservation_needs
from aksgpu.preflight.quota import QuotaNeed, quota_needs, usage_command
from aksgpu.preflight.verdict_history import WATCHDOG_FAILURES

# What judges a new node (source -> verdicts), and what of it is a failure (node/node_gate.py,
# fabric_acceptance.py, node_watchdog.py).
JUDGING = {"gate": ("passed", "accepting", "failed"), "acceptance": ("passed", "failed"), "watchdog": ("failed",)}
ANY_ZONE = "*"


@dataclass(frozen=True)
class Rate:
    """Gate verdicts of one size in one zone: distinct nodes, and those that failed."""

    nodes: int
    failed: int

    @property
    def value(self) -> float:
        return self.failed / self.nodes if self.nodes else 0.0

    def text(self) -> str:
        return f"{self.failed} of {self.nodes} new nodes failed the gate ({self.value:.0%})"


def _zone_of(entry: dict[str, Any]) -> str:
    """"1" from a zone label such as "eastus2-1" (topology.kubernetes.io/zone); ANY_ZONE when absent."""
    zone = entry.get("zone")
    if not isinstance(zone, str) or not zone:
        return ANY_ZONE
    return zone.rsplit("-", 1)[-1]


def _of_pool(entry: dict[str, Any], pool: NodePool) -> bool:
    size = entry.get("vmSize")
    if isinstance(size, str) and size:
        return size.lower() == pool.vm_size.lower()
    return entry.get("pool") in {zone_pool.name for zone_pool in pool.agent_pools()}


def _judges(entry: dict[str, Any]) -> bool:
    source = entry.get("source")
    return (isinstance(source, str) and entry.get("verdict") in JUDGING.get(source, ())
            and (source != "watchdog" or entry.get("check") in WATCHDOG_FAILURES))


def judging_entries(history: list[dict[str, Any]], pool: NodePool) -> list[dict[str, Any]]:
    """The verdicts that judged new nodes of the pool's size (a missing key: not counted, except as said above)."""
    return [entry for entry in history
            if _judges(entry) and _of_pool(entry, pool) and isinstance(entry.get("node"), str)]


def gate_entries(history: list[dict[str, Any]], pool: NodePool) -> list[dict[str, Any]]:
    """The gate's verdicts on new nodes of the pool's size: their node-to-verdict times."""
    return [entry for entry in judging_entries(history, pool) if entry.get("source") == "gate"]


def failure_rates(history: list[dict[str, Any]], pool: NodePool) -> dict[str, Rate]:
    """Zone ("1", "2", "3", or ANY_ZONE for the size as a whole) -> the rate of its nodes."""
    nodes: dict[str, dict[str, bool]] = {}
    for entry in judging_entries(history, pool):
        for zone in {_zone_of(entry), ANY_ZONE}:
            found = nodes.setdefault(zone, {})
            found[entry["node"]] = found.get(entry["node"], False) or entry["verdict"] == "failed"
    return {zone: Rate(len(found), sum(found.values())) for zone, found in nodes.items()}


def zone_rate(rates: dict[str, Rate], zone: str) -> Rate | None:
    """The zone's rate, or the size's as a whole where the zone has no entries (None: no entries at all)."""
    return rates.get(zone) or rates.get(ANY_ZONE)


def adjusted(demand: int, rate: Rate | None) -> int:
    """demand x (1 + the observed failure rate), rounded up."""
    return math.ceil(demand * (1 + (rate.value if rate else 0.0)) - 1e-9)


def _percentile(values: list[int], share: float) -> int:
    """The nearest-rank percentile of sorted values."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


@dataclass
class ScaleOut:
    """How long a scale-out to maxCount takes, and what the figure rests on."""

    seconds: int
    high_seconds: int
    measured: int  # verdicts the figures come from (0: anchors)
    basis: str


def scale_out(spec: ClusterSpec, pool: NodePool, history: list[dict[str, Any]] | None) -> ScaleOut:
    table = catalog.load("deploy_durations")["scaleOut"]
    delay = int(table["autoscalerGpuDelay"]["seconds"])
    provision = sum(step.seconds for step in provision_steps(pool))
    before = delay + provision
    times = [int(entry["secondsToVerdict"]) for entry in gate_entries(history or [], pool)
             if isinstance(entry.get("secondsToVerdict"), int | float) and entry["secondsToVerdict"] >= 0]
    if times:
        median, p90 = _percentile(times, 0.5), _percentile(times, 0.9)
        return ScaleOut(before + median, before + p90, len(times),
                        f"measured: node-to-verdict median {median} s, p90 {p90} s over {len(times)} gate verdicts "
                        f"of {pool.vm_size}, plus {before} s before the Node exists (autoscaler GPU delay {delay} s, "
                        f"provision {provision} s: anchors)")
    gate = spec.gpu_health.gate
    custom = gate.command != DEFAULT_CHECK_COMMAND
    check = gate.timeout_seconds if custom else int(table["defaultCheck"]["seconds"])
    startup = sum(step.seconds for step in startup_steps(pool))
    high = delay + max(int(table["gpuProvisionHigh"]["seconds"]), provision) + startup + gate.timeout_seconds
    return ScaleOut(before + startup + check, high, 0,
                    f"anchors: autoscaler GPU delay {delay} s, provision {provision} s, startup {startup} s, "
                    f"check {check} s ({'its time limit, a custom check' if custom else 'DCGM level 2'}); high: a "
                    f"GPU node's {table['gpuProvisionHigh']['seconds']} s to Ready where capacity is scarce and the "
                    "check's whole time limit (deploy_durations.yaml scaleOut, gpuNodeStartup)")


@dataclass
class PoolCapacity:
    """The capacity section of one GPU pool."""

    pool: NodePool
    path: str
    lines: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    document: dict[str, Any] = field(default_factory=dict)


def _availability(spec: ClusterSpec, pool: NodePool) -> tuple[str, dict[str, Any]]:
    table = catalog.load("azure_availability")
    regions = table["regions"].get(pool.vm_size)
    zones = table["zones"].get(spec.location, {}).get(pool.vm_size)
    sold = ("not in the regions table" if regions is None else
            f"sold in {spec.location}" if spec.location in regions else f"NOT listed in {spec.location}")
    offered = (f"zones {', '.join(zones) or 'none'}" if zones is not None
               else f"zones not in the table for {spec.location}")
    text = (f"availability: {sold} (Retail Prices API, {table['regionsDate']}); {offered} (Resource SKUs API, "
            f"{table['zonesDate']}; zone numbers differ per subscription)")
    return text, {"region": None if regions is None else spec.location in regions, "zones": zones,
                  "regionsDate": str(table["regionsDate"]), "zonesDate": str(table["zonesDate"])}


def _quota(needs: dict[str, QuotaNeed], pool: NodePool) -> tuple[str, dict[str, Any]]:
    size = pool.size
    if size is None:
        return "quota: the size is not in aksgpu's table, so its family is unknown", {}
    counter = catalog.load("azure_quota")["spotCounter"] if pool.is_spot else size.quota_family
    need = needs.get(counter) if counter else None
    own = pool.node_range[1] * size.vcpus
    total = need.vcpus_max if need else own
    text = (f"quota: {own} vCPUs of {counter} at full scale with surge ({total} for the cluster); the limit is your "
            f"subscription's: {usage_command([need]) if need else 'see `aksgpu plan --json` preflight.quota'}")
    return text, {"counter": counter, "poolVcpus": own, "clusterVcpus": total}


def _reservations(found: PoolCapacity, rates: dict[str, Rate]) -> list[dict[str, Any]]:
    """The reservation's cover per zone: needed (maxCount plus surge), reliability-adjusted, reserved."""
    pool, path = found.pool, found.path
    nodes, surge = pool_peak(pool)
    needs = reservation_needs(pool)
    reserved = {str(zone): count for zone, count in pool.capacity_reservations.items()}
    rows: list[dict[str, Any]] = []
    for zone in [] if pool.is_spot else list(needs):  # spot VMs use no reservation
        rate = zone_rate(rates, zone if zone != REGIONAL else ANY_ZONE)
        rows.append({"zone": zone, "needed": needs[zone], "adjusted": adjusted(needs[zone], rate),
                     "reserved": reserved.get(zone), "failureRate": None if rate is None else round(rate.value, 4)})
    wanted = ", ".join(f"{row['needed']} in {_where(row['zone'])}" for row in rows)
    if pool.is_spot:
        found.lines.append("reservation: none (spot VMs cannot use capacity reservations)")
    elif pool.capacity_reservation_group_id is None:
        found.lines.append(f"reservation: none (on-demand capacity); maxCount {nodes} + surge {surge} would need "
                           f"{wanted}")
    elif not reserved:
        found.lines.append("reservation: a group is set but capacityReservations does not say what it holds, so its "
                           f"cover is unchecked; it needs {wanted}")
    else:
        cells = [f"{_where(row['zone'])}: reserved {row['reserved'] or 0}, needed {row['needed']}, "
                 f"reliability-adjusted {row['adjusted']}" for row in rows]
        found.lines.append(f"reservation (maxCount {nodes} + surge {surge}): " + "; ".join(cells))
        for row in rows:
            held, needed, wants = int(row["reserved"] or 0), int(row["needed"]), int(row["adjusted"])
            if needed <= held < wants:  # below needed is the spec's error (spec/reservation_checks.py)
                found.warnings.append(f"{path}.capacityReservations.{row['zone']}: reserves {held}, below the "
                                      f"reliability-adjusted {wants} ({needed} x (1 + {row['failureRate']:.0%} gate "
                                      f"failures)): reserve {wants}")
    return rows


def _balloons(found: PoolCapacity, rates: dict[str, Rate]) -> dict[str, Any]:
    """balloonNodes beside its reliability-adjusted figure (the highest rate of the pool's zones)."""
    pool = found.pool
    zones: list[str] = list(pool.zones) or [ANY_ZONE]
    rate = max((r for zone in zones if (r := zone_rate(rates, zone))), key=lambda r: r.value, default=None)
    wants = adjusted(pool.balloon_nodes, rate)
    if pool.balloon_nodes:
        found.lines.append(f"headroom: balloonNodes {pool.balloon_nodes}, reliability-adjusted {wants}")
        if rate is not None and wants > pool.balloon_nodes:
            found.warnings.append(f"{found.path}.balloonNodes: {pool.balloon_nodes} balloons, below the "
                                  f"reliability-adjusted {wants} ({rate.text()}): set balloonNodes: {wants}")
    return {"configured": pool.balloon_nodes, "adjusted": wants,
            "failureRate": None if rate is None else round(rate.value, 4)}


def pool_capacity(spec: ClusterSpec, pool: NodePool, path: str, history: list[dict[str, Any]] | None,
                  needs: dict[str, QuotaNeed]) -> PoolCapacity:
    """One GPU pool's section; `needs`: the cluster's quota needs by counter (quota_needs, once per spec)."""
    found = PoolCapacity(pool, path)
    rates = failure_rates(history or [], pool)
    nodes, surge = pool_peak(pool)
    reservation_rows = _reservations(found, rates)
    available, availability = _availability(spec, pool)
    quota, quota_json = _quota(needs, pool)
    found.lines += [available, quota]
    balloons = _balloons(found, rates)
    if rates:
        per_zone = "; ".join(f"{'any zone' if zone == ANY_ZONE else 'zone ' + zone}: {rate.text()}"
                             for zone, rate in sorted(rates.items()))
        found.lines.append(f"gate history: {per_zone}")
    estimate = scale_out(spec, pool, history)
    found.lines.append(f"scale-out to maxCount {nodes}: about {math.ceil(estimate.seconds / 60)} min, up to "
                       f"{math.ceil(estimate.high_seconds / 60)} min ({estimate.basis})")
    found.document = {
        "pool": pool.name, "path": path, "vmSize": pool.vm_size, "maxNodes": nodes, "surge": surge,
        "capacityReservationGroupId": pool.capacity_reservation_group_id, "reservations": reservation_rows,
        "availability": availability, "quota": quota_json, "balloons": balloons,
        "failureRates": {zone: {"nodes": r.nodes, "failed": r.failed} for zone, r in sorted(rates.items())},
        "scaleOut": {"seconds": estimate.seconds, "highSeconds": estimate.high_seconds,
                     "measuredVerdicts": estimate.measured, "basis": estimate.basis},
        "warnings": found.warnings,
    }
    return found


def _where(zone: str) -> str:
    return "the region" if zone == REGIONAL else f"zone {zone}"


def capacity(spec: ClusterSpec, history: list[dict[str, Any]] | None) -> list[PoolCapacity]:
    """The capacity section of every GPU pool of the spec, in pool order."""
    needs = {need.counter: need for need in quota_needs(spec)}
    return [pool_capacity(spec, pool, f"nodePools[{index}]", history, needs)
            for index, pool in enumerate(spec.node_pools) if pool.kind == "gpu"]


def capacity_lines(found: list[PoolCapacity], history_source: str | None,
                   heading: str = "Capacity of the GPU pools") -> list[str]:
    """The plan's text section (`heading`: a fleet's plan names the member)."""
    if not found:
        return []
    source = (f"the gate's verdict history {history_source}" if history_source else
              "anchors only: no verdict history (docs/guides/capacity.md: `aksgpu verdict-history query STACK`)")
    lines = ["", f"{heading} (estimates from {source}):"]
    for pool in found:
        lines.append(f"  {pool.pool.name} ({pool.pool.vm_size}):")
        lines += [f"    {line}" for line in pool.lines]
        lines += [f"    WARNING {warning}" for warning in pool.warnings]
    return lines
