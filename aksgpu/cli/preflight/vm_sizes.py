"""`aksgpu vm-sizes [--gpu] [--json]`: the VM sizes aksgpu knows, with the facts its checks,
quota plan and cost estimate use. Only typer and the standard library at import."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from aksgpu.cli.console import echo_json

if TYPE_CHECKING:
    from aksgpu.catalog import VmSize

UNKNOWN = "?"


def vm_sizes(
    gpu: Annotated[bool, typer.Option("--gpu", help="Only sizes with GPUs.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print every fact of every size as JSON.")] = False,
) -> None:
    """List the VM sizes aksgpu knows: vCPUs, memory, GPUs, local disks, where an ephemeral OS disk
    goes, InfiniBand, MIG, vCPU quota family, encryption at host and retirement.

    "?" marks a fact no public source gives (query it with `az vm list-skus`). The table, with the
    source of every series, is aksgpu/catalog/vm_sizes.yaml.
    """
    from aksgpu import catalog

    sizes = {name: size for name, size in sorted(catalog.vm_sizes().items()) if size.gpus or not gpu}
    if as_json:
        table = catalog.load("vm_sizes")
        echo_json({"source": table["source"], "retrieved": str(table["retrieved"]),
                   "sizes": {name: _json_ready(size) for name, size in sizes.items()},
                   "gpuModels": table["gpuModels"], "series": table["series"]})
        return
    header = ["size", "vCPU", "GiB", "GPUs", "temp", "NVMe", "cache", "eph. OS", "IB", "MIG", "quota family",
              "host enc.", "retired"]
    rows = [header] + [_row(name, size) for name, size in sizes.items()]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        typer.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    table = catalog.load("vm_sizes")
    typer.echo(f"\n{len(sizes)} sizes; table of {table['retrieved']} (aksgpu/catalog/vm_sizes.yaml, sources "
               "per series: `aksgpu vm-sizes --json`). ? = not published.")


def _row(name: str, size: VmSize) -> list[str]:
    gpus = "-"
    if size.gpus:
        share = f"{size.gpu_fraction} " if size.gpu_fraction else f"{size.gpus}x "
        memory = f"{size.gpu_memory_gb}GB"
        model = size.gpu_model or ""
        gpus = f"{share}{model}" + ("" if memory in model and not size.gpu_fraction else f" ({memory})")
    nvme = f"{size.nvme.disks}x{size.nvme.disk_gib}" if size.nvme else "-"
    return [
        name.removeprefix("Standard_"), str(size.vcpus), str(size.memory_gib), gpus,
        str(size.temp_disk_gib), nvme, _known(size.cache_gib, size.cache_listed),
        _known(size.ephemeral_placement, True), size.infiniband or "-",
        ",".join(p.removeprefix("MIG") for p in size.mig_profiles) if size.mig else "-",
        _known(size.quota_family, True), _known(size.encryption_at_host, True),
        f"{size.retired} -> {size.replacement or '?'}" if size.retired else "-",
    ]


def _known(value: Any, applies: bool) -> str:
    if not applies:
        return "-"
    if value is None:
        return UNKNOWN
    if value is True:
        return "yes"
    return str(value)


def _json_ready(size: VmSize) -> dict[str, Any]:
    return {key: str(value) if key == "retired" else value for key, value in size.row.items()}
