"""A CostEstimate as people read it: text (plan, `aksgpu cost`), markdown (the pull-request
summary) and the difference between two estimates (`aksgpu diff`)."""

from __future__ import annotations

from typing import Any

from aksgpu.preflight.cost import CostEstimate, Scale


def money(value: float) -> str:
    return f"${value:,.2f}"


def scale_text(value: Scale | None, factor: float = 1.0) -> str:
    """'min / typical / max' in dollars; 'no price' when unknown."""
    if value is None:
        return "no price"
    value = value.times(factor)
    if value.min == value.typical == value.max:
        return money(value.min)
    return " / ".join(money(part) for part in (value.min, value.typical, value.max))


def headline(found: CostEstimate) -> str:
    text = (f"{scale_text(found.monthly)} per month ({scale_text(found.hourly)} per hour) at min / typical / max "
            f"scale, {found.table.currency}, {found.region}, {found.table.label()}")
    if not found.complete:
        text += f"; {len(found.missing)} price{'s' if len(found.missing) > 1 else ''} missing, so a lower bound"
    if found.pools and found.region not in found.table.regions():
        text += f"; the price table has no prices for {found.region} (`aksgpu prices refresh --region {found.region}`)"
    return text


def text_lines(found: CostEstimate) -> list[str]:
    """The Cost section of the plan and the output of `aksgpu cost`."""
    hours = found.table.hours_per_month
    pools = [[pool.name, pool.vm_size, pool.priority,
              "no price" if pool.node_hour is None else f"${pool.node_hour:,.4f}",
              f"{pool.nodes.min:g} / {pool.nodes.typical:g} / {pool.nodes.max:g}",
              scale_text(pool.hourly), scale_text(pool.hourly, hours)] for pool in found.pools]
    fixed = [[part.label, scale_text(part.hourly), scale_text(part.hourly, hours)] for part in found.fixed]
    fixed.append(["total" + ("" if found.complete else " (prices missing: a lower bound)"),
                  scale_text(found.hourly), scale_text(found.monthly)])
    lines = [f"Cost estimate at min / typical / max nodes ({found.table.currency}, {found.region}, "
             f"{found.table.label()}):"]
    if pools:  # a fleet's shared stack has none
        lines += _table(["pool", "vm size", "priority", "per node-hour", "nodes", "per hour", "per month"], pools,
                        right={3, 5, 6})
        lines += [""]
    priced = [pool for pool in found.pools if pool.hourly is not None]
    node_pools = _sum(found) if priced or not found.pools else None
    lines += _table(["pools and fixed parts", "per hour", "per month"],
                    [["node pools" + ("" if len(priced) == len(found.pools) else " (some without a price)"),
                      scale_text(node_pools), scale_text(node_pools, hours)], *fixed], right={1, 2})
    lines += region_lines(found)
    lines += _listed("Missing prices (not counted)", found.missing)
    lines += _listed("Not estimated (usage-based)", found.not_estimated)
    lines += _listed("Assumptions", found.assumptions)
    return lines


def region_lines(found: CostEstimate) -> list[str]:
    """A line naming the region when the price table has no VM prices for it at all, with the fix."""
    regions = found.table.regions()
    if not found.pools or found.region in regions:
        return []
    return [f"  No VM prices for region {found.region} in the {found.table.label()}; it has "
            f"{', '.join(regions) or 'none'}. Fix: `aksgpu prices refresh --region {found.region}` (Azure's "
            "retail prices API; writes stacks/prices.yaml, which plan and cost then read)."]


def _sum(found: CostEstimate) -> Scale:
    total = Scale.flat(0.0)
    for pool in found.pools:
        total = total + pool.hourly if pool.hourly is not None else total
    return total


def _listed(title: str, items: list[str]) -> list[str]:
    if not items:
        return []
    return [f"  {title}:", *[f"    - {item}" for item in items]]


def _table(header: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return ["  " + "  ".join(cell.rjust(w) if i in right else cell.ljust(w)
                             for i, (cell, w) in enumerate(zip(row, widths, strict=True))).rstrip()
            for row in [header, *rows]]


def markdown_lines(facts: dict[str, Any]) -> list[str]:
    """The pull-request summary's Cost section, from CostEstimate.json()."""
    def cell(monthly: dict[str, float] | None) -> str:
        if monthly is None:
            return "no price"
        return " / ".join(money(monthly[key]) for key in ("min", "typical", "max"))

    table = facts["priceTable"]
    lines = [f"Per month at min / typical / max nodes, {facts['currency']}, {facts['region']}, price table of "
             f"{table['date']}" + ("" if table["shipped"] else f" ({table['path']})") + ".", "",
             "| part | priority | nodes | per month |", "| --- | --- | ---: | ---: |"]
    for pool in facts["pools"]:
        nodes = pool["nodes"]
        lines.append(f"| `{pool['name']}` {pool['vmSize']} | {pool['priority']} | "
                     f"{nodes['min']:g} / {nodes['typical']:g} / {nodes['max']:g} | {cell(pool['monthly'])} |")
    lines += [f"| {part['label']} | | | {cell(part['monthly'])} |" for part in facts["fixed"]]
    total = facts["total"]
    lines.append(f"| **total**{'' if total['complete'] else ' (lower bound)'} | | | **{cell(total['monthly'])}** |")
    if facts["missing"]:
        lines += ["", *[f"- ❔ {item}" for item in facts["missing"]]]
    return lines


def difference(a: CostEstimate, b: CostEstimate, name_a: str, name_b: str) -> dict[str, Any]:
    """Monthly cost of two estimates at typical and max scale, and b - a."""
    rows = {}
    for scale in ("typical", "max"):
        cost_a, cost_b = getattr(a.monthly, scale), getattr(b.monthly, scale)
        rows[scale] = {name_a: round(cost_a, 2), name_b: round(cost_b, 2), "difference": round(cost_b - cost_a, 2)}
    return {"currency": a.table.currency, "priceTable": a.table.date, "monthly": rows,
            "complete": a.complete and b.complete,
            "missing": {name_a: a.missing, name_b: b.missing}}


def difference_lines(diff: dict[str, Any], name_a: str, name_b: str) -> list[str]:
    lines = [f"Monthly cost ({diff['currency']}, price table of {diff['priceTable']}):"]
    for scale, row in diff["monthly"].items():
        change = row["difference"]
        sign = "+" if change > 0 else ("-" if change < 0 else "±")
        lines.append(f"  {scale:<8} {name_a} {money(row[name_a])}, {name_b} {money(row[name_b])}: "
                     f"{sign}{money(abs(change))} per month")
    for name, missing in diff["missing"].items():
        if missing:
            lines.append(f"  {name} lacks {len(missing)} price{'s' if len(missing) > 1 else ''}, so its cost is a "
                         "lower bound (`aksgpu cost` lists them)")
    return lines
