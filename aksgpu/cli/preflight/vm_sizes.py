"""`aksgpu vm-sizes [--gpu] [--json]`: the VM sizes aksgpu knows, with the facts its checks,
quota plan and cost estimate use. Only typer and the standard library at import."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from aksgpu.cli.console import echo_json

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

    sizes = {name: size for name, size in sorted(catalog.vm_sizes().items()) if size.get("gpus") or not gpu}
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


def _row(name: str, size: dict[str, Any]) -> list[str]:
    gpus = "-"
    if size.get("gpus"):
        share = f"{size['gpuFraction']} " if size.get("gpuFraction") else f"{size['gpus']}x "
        memory = f"{size['gpuMemoryGb']}GB"
        gpus = f"{share}{size['gpuModel']}" + ("" if memory in size["gpuModel"] and not size.get("gpuFraction")
                                               else f" ({memory})")
    nvme = f"{size['nvme']['disks']}x{size['nvme']['diskGib']}" if size.get("nvme") else "-"
    return [
        name.removeprefix("Standard_"), str(size["vcpus"]), str(size["memoryGib"]), gpus,
        str(size["tempDiskGib"]), nvme, _known(size.get("cacheGib"), "cacheGib" in size),
        _known(size.get("ephemeralPlacement"), True), size.get("infiniband", "-"),
        ",".join(p.removeprefix("MIG") for p in size.get("migProfiles", {})) if size.get("mig") else "-",
        _known(size.get("quotaFamily"), True), _known(size.get("encryptionAtHost"), True),
        f"{size['retired']} -> {size.get('replacement', '?')}" if size.get("retired") else "-",
    ]


def _known(value: Any, applies: bool) -> str:
    if not applies:
        return "-"
    if value is None:
        return UNKNOWN
    if value is True:
        return "yes"
    return str(value)


def _json_ready(size: dict[str, Any]) -> dict[str, Any]:
    return {key: str(value) if key == "retired" else value for key, value in size.items()}
