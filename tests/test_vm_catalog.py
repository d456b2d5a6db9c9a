"""The VM size catalog (aksgpu/catalog/vm_sizes.yaml) is sourced and consistent with
itself, and `aksgpu vm-sizes` shows it."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from aksgpu.cli.app import app
from aksgpu import catalog

TABLE = catalog.load("vm_sizes")
SIZES = catalog.vm_sizes()
PLACEMENTS = {"CacheDisk", "ResourceDisk", "NvmeDisk", None}
runner = CliRunner()


def test_the_table_is_dated_and_every_series_and_gpu_model_has_a_source() -> None:
    assert TABLE["retrieved"] and len(TABLE["source"]) >= 3
    assert {size["series"] for size in TABLE["sizes"].values()} <= set(TABLE["series"])
    assert all(TABLE["series"].values())
    assert all(model["peakSource"] for model in TABLE["gpuModels"].values())


@pytest.mark.parametrize("name", sorted(SIZES))
def test_each_size_is_consistent(name: str) -> None:
    size = SIZES[name]
    named_vcpus = re.match(r"^Standard_[A-Za-z]+(\d+)", name)
    assert named_vcpus and int(named_vcpus.group(1)) == size.vcpus, "the name's number is the vCPU count"
    assert size.memory_gib >= size.vcpus and size.temp_disk_gib >= 0
    assert size.ephemeral_placement in PLACEMENTS
    if size.ephemeral_placement == "CacheDisk":
        assert size.cache_gib, "a cache placement needs the cache size"
    if size.ephemeral_placement == "NvmeDisk":
        assert size.nvme and size.temp_disk_gib == 0
    if size.ephemeral_placement == "ResourceDisk":
        assert size.temp_disk_gib > 0
    if size.gpus:
        assert size.gpu is not None and size.gpu_model in catalog.gpu_models() and size.vendor in ("nvidia", "amd")
        if size.gpu_fraction:
            numerator, denominator = map(int, size.gpu_fraction.split("/"))
            assert size.gpu_memory_gb is not None and not size.mig
            assert size.gpu_memory_gb * denominator == size.gpu.memory_gb * numerator
    else:
        assert size.gpu is None and "gpuModel" not in size.row
    if size.retired:
        assert size.replacement is not None
        replacement = SIZES[size.replacement]
        assert not replacement.retired and bool(replacement.gpus) == bool(size.gpus)
    family = size.quota_family
    assert family is None or re.fullmatch(r"[Ss]tandard ?[A-Za-z0-9_ ]+Family", family)


@pytest.mark.parametrize("model", sorted(TABLE["gpuModels"]))
def test_mig_profiles_fit_their_gpu(model: str) -> None:
    facts = TABLE["gpuModels"][model]
    if not facts["mig"]:
        return
    assert set(facts["mig"]) == set(TABLE["migInstancesPerGpu"])
    for profile, nvidia_name in facts["mig"].items():
        slices, memory = re.fullmatch(r"(\d)g\.(\d+)gb", nvidia_name).groups()
        assert int(slices) == int(profile[3]), (profile, nvidia_name)
        # NVIDIA rounds profile names up (H200: 2 x 3g.71gb of 141 GB).
        assert int(memory) * TABLE["migInstancesPerGpu"][profile] <= facts["memoryGb"] * 1.02, (profile, nvidia_name)
    assert facts["mig"]["MIG7g"] == f"7g.{facts['memoryGb']}gb", "one instance holds the whole GPU"


def test_the_command_lists_sizes_and_gpu_filters() -> None:
    every = runner.invoke(app, ["vm-sizes"])
    gpu_only = runner.invoke(app, ["vm-sizes", "--gpu"])
    assert every.exit_code == 0 and gpu_only.exit_code == 0
    assert "D8ds_v5" in every.output and "D8ds_v5" not in gpu_only.output
    line = next(row for row in gpu_only.output.splitlines() if row.startswith("NC24ads_A100_v4 "))
    assert "256" in line and "CacheDisk" in line and "StandardNCADSA100v4Family" in line
    retired = next(row for row in gpu_only.output.splitlines() if row.startswith("NC6s_v3 "))
    assert "2025-09-30 -> Standard_NC40ads_H100_v5" in retired


def test_the_json_carries_every_fact_and_the_sources() -> None:
    result = runner.invoke(app, ["vm-sizes", "--gpu", "--json"])
    document = json.loads(result.output)
    assert set(document["sizes"]) == {name for name, size in SIZES.items() if size.gpus}
    assert document["sizes"]["Standard_ND96isr_H100_v5"]["migProfiles"]["MIG3g"] == "3g.40gb"
    assert document["retrieved"] == str(TABLE["retrieved"]) and document["series"]["ND_H100_v5"]


def test_the_availability_table_is_sourced_and_names_known_sizes_and_regions() -> None:
    table = catalog.load("azure_availability")
    assert table["retrieved"] and table["source"]["regions"] and table["source"]["zones"]
    known_regions = set(catalog.load("azure_regions")["regions"])
    for size, regions in table["regions"].items():
        assert size in SIZES and SIZES[size].gpus, size
        assert regions == sorted(set(regions)) and set(regions) <= known_regions, (size, set(regions) - known_regions)
    for region, sizes in table["zones"].items():
        assert region in known_regions and set(sizes) <= set(SIZES)
        for size, zones in sizes.items():
            assert set(zones) <= {"1", "2", "3"}
            assert size not in table["regions"] or region in table["regions"][size], "zones only where it is sold"


def test_the_availability_snapshots_carry_their_own_dates() -> None:
    import datetime

    table = catalog.load("azure_availability")
    assert table["regionsDate"] == datetime.date(2026, 6, 18) and table["zonesDate"] == datetime.date(2025, 6, 3)
    assert str(table["regionsDate"]) in table["source"]["regions"]
    assert str(table["zonesDate"]) in table["source"]["zones"]
