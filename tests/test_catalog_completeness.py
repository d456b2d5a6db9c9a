"""Adding a VM size is one row in aksgpu/catalog/vm_sizes.yaml, plus a row (or a stated reason
for none) in each table that keeps its facts apart: the availability snapshot, the price table
(written by `aksgpu prices refresh`) and, per GPU model, the GPU check's thresholds. This test
fails naming every table a size is missing from, with the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from aksgpu import catalog
from aksgpu.catalog.vm import REQUIRED_SIZE_KEYS, SIZE_KEYS, vm_sizes_of

THRESHOLDS = Path(catalog.__file__).resolve().parents[1] / "node" / "gpu_check" / "thresholds.yaml"


def _thresholds() -> dict[str, Any]:
    return yaml.safe_load(THRESHOLDS.read_text(encoding="utf-8"))


def gaps(sizes: dict[str, catalog.VmSize], availability: dict[str, Any], prices: dict[str, Any],
         thresholds: dict[str, Any]) -> list[str]:
    """Every table each size (or its GPU model) is missing from, with the fix; empty when complete."""
    found = []
    priced = {name for rows in (prices.get("vm") or {}).values() for name in rows or {}}
    for name, size in sorted(sizes.items()):
        if size.retired:
            continue  # a retired size keeps its row for the retirement check only
        if size.gpus and name not in availability["regions"] and name not in availability.get("unlisted", {}):
            found.append(f"{name}: no row in catalog/azure_availability.yaml regions; add the regions Azure sells it "
                         "in (with the snapshot's source), or list it under unlisted: with the reason")
        if name not in priced and name not in prices.get("unpriced", {}):
            found.append(f"{name}: no price in catalog/prices.yaml vm; add its rows (`aksgpu prices refresh` reads "
                         "them from the Retail Prices API), or list it under unpriced: with the reason")
        model = size.gpu
        if model is None:
            continue
        named = model.name in thresholds["nvmlNames"]
        if not named and model.name not in thresholds.get("unnamedModels", {}):
            found.append(f"{name}: GPU model {model.name} has no nvmlNames in node/gpu_check/thresholds.yaml; add "
                         "the device names NVML reports for it, or list it under unnamedModels: with the reason")
        if (named and model.peak_tflops and model.name not in thresholds["computeFraction"]
                and model.name not in thresholds.get("uncalibrated", {})):
            found.append(f"{name}: GPU model {model.name} has no computeFraction in node/gpu_check/thresholds.yaml; "
                         "add the share of its peak a healthy GPU reaches, or list it under uncalibrated: with the "
                         "reason")
    return found


def test_every_size_is_in_every_table_or_says_why_not() -> None:
    found = gaps(catalog.vm_sizes(), catalog.load("azure_availability"), catalog.load("prices"), _thresholds())
    assert not found, "\n".join(found)


def test_every_stated_reason_names_a_known_size_or_model_and_says_something() -> None:
    sizes, models, thresholds = catalog.vm_sizes(), catalog.gpu_models(), _thresholds()
    for table, listed in (("azure_availability.yaml unlisted", catalog.load("azure_availability")["unlisted"]),
                          ("prices.yaml unpriced", catalog.load("prices")["unpriced"])):
        for name, reason in listed.items():
            assert name in sizes and isinstance(reason, str) and len(reason) > 20, (table, name)
    for key in ("unnamedModels", "uncalibrated"):
        for model, reason in thresholds[key].items():
            assert model in models and isinstance(reason, str) and len(reason) > 20, (key, model)
    assert not set(thresholds["unnamedModels"]) & set(thresholds["nvmlNames"])
    assert not set(thresholds["uncalibrated"]) & set(thresholds["computeFraction"])


def test_a_new_size_missing_from_every_table_is_named_with_each_fix() -> None:
    """The check itself: a GPU size with a new GPU model and no other rows is named with each table."""
    table = catalog.load("vm_sizes")
    new = {**table, "sizes": {"Standard_NX8_Z1_v9": {
        "series": "NCv3", "vcpus": 8, "memoryGib": 64, "gpus": 1, "gpuModel": "Z1", "tempDiskGib": 100,
        "quotaFamily": None, "encryptionAtHost": None}},
        "gpuModels": {**table["gpuModels"], "Z1": {
            "vendor": "nvidia", "architecture": "Future", "memoryGb": 96, "mig": None, "bf16DenseTflops": 500,
            "fp16DenseTflops": 500, "memoryBandwidthTBs": 4.0, "peakSource": "made up for this test"}}}
    found = gaps(vm_sizes_of(new), catalog.load("azure_availability"), catalog.load("prices"), _thresholds())
    assert len(found) == 3
    assert "azure_availability.yaml regions" in found[0] and "prices.yaml vm" in found[1]
    assert "Z1 has no nvmlNames in node/gpu_check/thresholds.yaml" in found[2]
    named = {**_thresholds(), "nvmlNames": {**_thresholds()["nvmlNames"], "Z1": ["Z1"]}}
    with_names = gaps(vm_sizes_of(new), catalog.load("azure_availability"), catalog.load("prices"), named)
    assert "Z1 has no computeFraction" in with_names[2], "a named model with a peak needs its fraction"
    assert all(line.startswith("Standard_NX8_Z1_v9: ") and " or list it under " in line for line in found)


@pytest.mark.parametrize(("change", "message"), [
    ({"vcpus": None}, "missing ['vcpus']"),
    ({"vCPUs": 8}, "unknown keys ['vCPUs']"),
    ({"gpuModel": "Z9"}, "a GPU size names gpus and a gpuModel of gpuModels"),
])
def test_a_row_with_a_missing_unknown_or_dangling_fact_fails_naming_the_size(change: dict[str, Any],
                                                                              message: str) -> None:
    table = catalog.load("vm_sizes")
    row = {**table["sizes"]["Standard_D8ds_v5"], **change}
    row = {key: value for key, value in row.items() if value is not None or key not in change}
    with pytest.raises(ValueError, match=r"sizes\.Standard_D8ds_v5: " + message.replace("[", r"\[").replace("]",
                                                                                                            r"\]")):
        vm_sizes_of({**table, "sizes": {"Standard_D8ds_v5": row}})


def test_the_typed_keys_cover_every_row() -> None:
    """Every key a row uses is typed (SIZE_KEYS), and the required ones are in every row."""
    rows = catalog.load("vm_sizes")["sizes"].values()
    assert set().union(*rows) <= SIZE_KEYS and all(REQUIRED_SIZE_KEYS <= set(row) for row in rows)
