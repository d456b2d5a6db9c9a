"""prices.yaml against its source: the VM rows equal a verbatim extract of the SkyPilot Azure catalog
(tests/data/skypilot-catalog/), every size a preset's pools use (system pool included) has a price or
a sourced reason for none, and no size is called unpriced while the source file has its row."""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from aksgpu import catalog
from aksgpu.environments.presets import all_presets
from aksgpu.spec.pools import SystemPool

DATA = Path(__file__).resolve().parent / "data" / "skypilot-catalog"
SOURCE_KEY = "skypilot-catalog"
# A reason is sourced when it names a repository file at a commit (owner/repo@hash) or a URL.
SOURCED = re.compile(r"[\w.-]+/[\w.-]+@[0-9a-f]{7,40}|https?://\S+")


def _manifest() -> dict[str, Any]:
    return yaml.safe_load((DATA / "manifest.yaml").read_text(encoding="utf-8"))


def _extract() -> list[dict[str, str]]:
    with (DATA / "vms-extract.csv").open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def _spot(row: dict[str, str]) -> float | None:
    """The catalog's SpotPrice as prices.yaml keeps it: empty (no Spot meter) or a repeat of the
    on-demand price (no Spot meter joined, as for H100) is null."""
    return None if row["SpotPrice"] in ("", row["Price"]) else float(row["SpotPrice"])


def _preset_sizes(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "vmSize" and isinstance(value, str):
                yield value
            else:
                yield from _preset_sizes(value)
    elif isinstance(node, list):
        for item in node:
            yield from _preset_sizes(item)


def unsourced(prices: dict[str, Any], extract: list[dict[str, str]], absent: dict[str, str],
              sizes: set[str]) -> list[str]:
    """Each of `sizes` with neither a price in some region nor a sourced reason, and each unpriced
    reason the source contradicts; empty when the table is sound."""
    found = []
    priced = {name for rows in (prices.get("vm") or {}).values() for name in rows or {}}
    unpriced = prices.get("unpriced") or {}
    in_source = {row["InstanceType"] for row in extract}
    for name in sorted(sizes):
        if name in priced:
            continue
        reason = unpriced.get(name)
        if reason is None:
            found.append(f"{name}: no price in prices.yaml vm and no unpriced: reason")
        elif not SOURCED.search(reason):
            found.append(f"{name}: unpriced reason names no source (repo@commit or URL): {reason!r}")
    for name, reason in sorted(unpriced.items()):
        if name in in_source:
            found.append(f"{name}: listed unpriced, but {SOURCE_KEY} vms.csv has its rows; add them under vm:")
        elif SOURCE_KEY in reason and name not in absent:
            found.append(f"{name}: reason says {SOURCE_KEY} lacks it; record the check in "
                         "tests/data/skypilot-catalog/manifest.yaml absent:")
    return found


def test_the_extract_is_the_manifests_sizes_in_its_regions_from_the_cited_commit() -> None:
    manifest, rows = _manifest(), _extract()
    assert {(row["InstanceType"], row["Region"]) for row in rows} == {
        (size, region) for size in manifest["sizes"] for region in manifest["regions"]}
    assert len(rows) == len(manifest["sizes"]) * len(manifest["regions"])
    source = catalog.load("prices")["sources"][SOURCE_KEY]["text"]
    assert f"{manifest['source']['path']}@{manifest['source']['commit']}" in source
    assert manifest["source"]["repo"] in source


def test_prices_yaml_holds_each_extract_row_with_its_spot_rule() -> None:
    vm = catalog.load("prices")["vm"]
    for row in _extract():
        got = (vm.get(row["Region"]) or {}).get(row["InstanceType"])
        assert got is not None, f"{row['InstanceType']} in {row['Region']}: the source has it, prices.yaml not"
        assert got == {"onDemand": float(row["Price"]), "spot": _spot(row), "source": SOURCE_KEY}, row


def test_every_size_a_preset_pool_uses_has_a_price_or_a_sourced_reason() -> None:
    sizes = {size for preset in all_presets() for size in _preset_sizes(preset.spec)}
    sizes.add(SystemPool.model_fields["vm_size"].default)
    assert "Standard_D8ds_v5" in sizes and len(sizes) > 4
    # ... and every size of vm_sizes.yaml that is not retired, since a user may pick any of them.
    sizes |= {name for name, size in catalog.vm_sizes().items() if not size.retired}
    found = unsourced(catalog.load("prices"), _extract(), _manifest()["absent"], sizes)
    assert not found, "\n".join(found)


def test_the_check_names_a_size_called_unpriced_while_the_source_has_its_row() -> None:
    """The state before 2026-11-27: system-pool sizes listed unpriced with an unsourced reason."""
    prices = catalog.load("prices")
    stale = "the shipped snapshot was compiled without a row for it; `aksgpu prices refresh` reads it"
    vm = {region: {name: row for name, row in rows.items() if name != "Standard_D4s_v5"}
          for region, rows in prices["vm"].items()}
    old = {**prices, "vm": vm, "unpriced": {**prices["unpriced"], "Standard_D4s_v5": stale,
                                            "Standard_ND96isr_H200_v5": stale}}
    found = unsourced(old, _extract(), _manifest()["absent"], {"Standard_D4s_v5", "Standard_ND96isr_H200_v5"})
    assert found == [
        f"Standard_D4s_v5: unpriced reason names no source (repo@commit or URL): {stale!r}",
        f"Standard_ND96isr_H200_v5: unpriced reason names no source (repo@commit or URL): {stale!r}",
        "Standard_D4s_v5: listed unpriced, but skypilot-catalog vms.csv has its rows; add them under vm:",
    ]
