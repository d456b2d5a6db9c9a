"""The docs' "Multi-node training" section (docs/guides/gpus/training.md): its per-size table is
what the data tables say (the InfiniBand ports of aksgpu/catalog/fabric.yaml and vm_sizes.yaml, the
bus bandwidth and floor of
data/fabric_acceptance.yaml), and its benchmark command runs."""

from __future__ import annotations

from pathlib import Path

from aksgpu.spec.fabric import fabric_profiles
from aksgpu.spec.fabric_acceptance import acceptance_floor
from tests.docs_pages import docs_page
from tests.docs_pages import section as docs_section

REPO = Path(__file__).resolve().parents[1]


def _gbs(value: float | None) -> str:
    return "not published" if value is None else f"{value:g} GB/s"


def training_rows() -> list[str]:
    """One table row per NVIDIA InfiniBand size: ports x rate, the VM's line rate in GB/s, and the
    all-reduce bus bandwidth a healthy pair reaches, the warning line and the floor, at Azure's size."""
    rows = []
    for vm_size, profile in sorted(fabric_profiles().items()):
        floor = acceptance_floor(vm_size)
        if floor is None:  # MI300X: listed in the fabric table, refused as an AMD pool
            continue
        line_rate = profile.hca_count * profile.port_gbps / 8
        rows.append(f"| {vm_size} | {profile.hca_count} x {profile.port_gbps} Gb/s | {line_rate:g} GB/s | "
                    f"{_gbs(floor.expected_gbs)} | {_gbs(floor.warn_gbs)} | {_gbs(floor.floor_gbs)} | "
                    f"{floor.message_bytes // 2**30} GiB |")
    return rows


def test_the_readme_training_table_is_the_data_tables() -> None:
    section = docs_section(docs_page("guides/gpus/training.md"), "Multi-node training")
    for row in training_rows():
        assert row in section, f"paste the row again: {row}"
    assert len(training_rows()) >= 6


def test_the_benchmark_named_in_the_section_exists() -> None:
    section = docs_section(docs_page("guides/gpus/training.md"), "Multi-node training")
    assert ".venv/bin/python tests/benchmark_training_pool.py" in section
    assert (REPO / "tests" / "benchmark_training_pool.py").is_file()
