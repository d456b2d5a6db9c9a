"""The price table: VM prices by region and size, fixed parts, volume assumptions, each row with
a source that has a date. The shipped table is aksgpu/catalog/prices.yaml; a table that
`aksgpu prices refresh` wrote has the same shape."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from aksgpu import catalog

KIND = "aksgpu-prices"
SHIPPED_PATH = catalog.DATA_DIR / "prices.yaml"


class PriceTableError(ValueError):
    """A price table that cannot be read or does not have the shape of one."""


@dataclass(frozen=True)
class VmPrice:
    on_demand: float | None
    spot: float | None
    source: str


@dataclass(frozen=True)
class PriceTable:
    raw: dict[str, Any]
    path: str  # where it was read from (for messages)

    @property
    def date(self) -> str:
        return str(self.raw["retrieved"])

    @property
    def currency(self) -> str:
        return str(self.raw.get("currency", "USD"))

    @property
    def hours_per_month(self) -> float:
        return float(self.raw.get("hoursPerMonth", 730))

    @property
    def shipped(self) -> bool:
        return self.path == str(SHIPPED_PATH)

    def label(self) -> str:
        """'the price table of DATE (where)', for every line that quotes a price."""
        where = "shipped with aksgpu" if self.shipped else self.path
        return f"price table of {self.date}, {where}"

    def vm(self, size: str, region: str) -> VmPrice | None:
        row = (self.raw.get("vm") or {}).get(region, {}).get(size)
        if row is None:
            return None
        return VmPrice(_number(row.get("onDemand")), _number(row.get("spot")), str(row.get("source", "")))

    def fixed(self, key: str) -> float | None:
        row = (self.raw.get("fixed") or {}).get(key)
        return None if row is None else _number(row.get("price"))

    def fixed_source(self, key: str) -> str | None:
        row = (self.raw.get("fixed") or {}).get(key)
        return None if row is None else str(row.get("source"))

    def assumption(self, key: str) -> dict[str, Any]:
        return dict((self.raw.get("assumptions") or {}).get(key) or {})

    def source(self, key: str) -> dict[str, Any]:
        return dict((self.raw.get("sources") or {}).get(key) or {})

    def regions(self) -> list[str]:
        return sorted(self.raw.get("vm") or {})


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def shipped_table() -> PriceTable:
    return PriceTable(catalog.load("prices"), str(SHIPPED_PATH))


def read_table(path: Path) -> PriceTable:
    """A price table from a file; PriceTableError when it is not one."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise PriceTableError(f"cannot read the price table {path}: {error}") from None
    problems = table_problems(raw)
    if problems:
        raise PriceTableError(f"{path} is not an aksgpu price table: {problems[0]}")
    return PriceTable(raw, str(path))


def is_price_table(path: Path) -> bool:
    """Whether `path` holds a table aksgpu wrote (so a refresh may replace it)."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    return isinstance(raw, dict) and raw.get("kind") == KIND


def table_problems(raw: Any) -> list[str]:
    """What is wrong with a table: shape, sources with dates, prices that are numbers >= 0 or null."""
    if not isinstance(raw, dict) or raw.get("kind") != KIND:
        return [f"kind is not {KIND}"]
    problems = []
    if not isinstance(raw.get("retrieved"), datetime.date):
        problems.append("retrieved is not a date")
    for section in ("sources", "fixed", "assumptions", "vm"):
        if not isinstance(raw.get(section) or {}, dict):
            problems.append(f"{section} is not a mapping")
    if problems:
        return problems
    for region, sizes in (raw.get("vm") or {}).items():
        if not isinstance(sizes or {}, dict):
            problems.append(f"vm.{region} is not a mapping of VM sizes")
    hours = raw.get("hoursPerMonth", 730)
    if isinstance(hours, bool) or not isinstance(hours, int | float) or hours <= 0:
        problems.append(f"hoursPerMonth = {hours!r} is not a number of hours above 0")
    insights = (raw.get("assumptions") or {}).get("containerInsights")
    if not isinstance(insights, dict) or not all(
            isinstance(insights.get(key), int | float) and not isinstance(insights.get(key), bool)
            and insights[key] > 0 for key in ("clusterMbPerHour", "clusterNodes")):
        problems.append("assumptions.containerInsights needs clusterMbPerHour and clusterNodes, numbers above 0")
    if problems:
        return problems
    sources = raw.get("sources") or {}
    for key, source in sources.items():
        if not isinstance(source, dict) or not source.get("text") or not isinstance(source.get("retrieved"),
                                                                                     datetime.date):
            problems.append(f"source {key} needs text and a retrieved date")
    for where, row in _rows(raw):
        if not isinstance(row.get("source"), str) or row["source"] not in sources:
            problems.append(f"{where} names no known source")
        for field in ("onDemand", "spot", "price"):
            value = row.get(field)
            if field in row and value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                                       or value < 0):
                problems.append(f"{where}.{field} = {value!r} is not a price (a number >= 0, or null)")
    return problems


def _rows(raw: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    rows = [(f"fixed.{key}", row) for key, row in (raw.get("fixed") or {}).items()]
    rows += [(f"assumptions.{key}", row) for key, row in (raw.get("assumptions") or {}).items()]
    rows += [(f"vm.{region}.{size}", row) for region, sizes in (raw.get("vm") or {}).items()
             for size, row in (sizes or {}).items()]
    return [(where, row if isinstance(row, dict) else {}) for where, row in rows]
