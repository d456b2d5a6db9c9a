"""Typed records of the VM size table (vm_sizes.yaml): VmSize and GpuModel, built once from the
table by the catalog's loader (aksgpu.catalog.vm_size, vm_sizes, gpu_model). Only the standard
library: the GPU check's image copies this file with the table."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# The keys a size's row may have (vm_sizes.yaml `sizes`), and those it must have. A row with a key
# outside these fails the build with the size and the key named.
SIZE_KEYS = {"series", "vcpus", "memoryGib", "gpus", "gpuFraction", "gpuModel", "gpuMemoryGb", "tempDiskGib",
             "nvme", "cacheGib", "ephemeralPlacement", "acceleratedNetworking", "infiniband", "quotaFamily",
             "encryptionAtHost", "burstable", "retired", "replacement", "cpuArchitecture"}
REQUIRED_SIZE_KEYS = {"series", "vcpus", "memoryGib", "tempDiskGib", "quotaFamily", "encryptionAtHost"}
GPU_MODEL_KEYS = {"vendor", "architecture", "memoryGb", "mig", "bf16DenseTflops", "fp16DenseTflops",
                  "memoryBandwidthTBs", "peakSource"}


@dataclass(frozen=True)
class GpuModel:
    """One GPU model of vm_sizes.yaml `gpuModels`: the facts that belong to the GPU, not the VM."""

    name: str
    """The model's key (e.g. "H100 SXM"), which sizes name as gpuModel."""
    vendor: str
    """"nvidia" or "amd"."""
    architecture: str
    """e.g. Hopper, Ampere, CDNA 3."""
    memory_gb: int
    """Memory of one whole GPU, GB."""
    mig_profiles: Mapping[str, str]
    """AKS MIG profile (MIG1g..MIG7g) to the NVIDIA profile it creates; empty when AKS cannot split it."""
    bf16_dense_tflops: float | None
    """Dense BF16 peak, TFLOPS; None where the GPU has none or no source gives it."""
    fp16_dense_tflops: float | None
    """Dense FP16 peak, TFLOPS; None where no source gives it."""
    memory_bandwidth_tbs: float | None
    """Peak memory bandwidth, TB/s; None where no source gives it."""
    peak_source: str
    """Where the peaks come from."""

    @property
    def peak_tflops(self) -> float | None:
        """The dense peak the GPU check scales: BF16, else FP16 (a GPU without BF16)."""
        return self.bf16_dense_tflops or self.fp16_dense_tflops


@dataclass(frozen=True)
class NvmeDisks:
    """A size's local NVMe disks."""

    disks: int
    disk_gib: int

    @property
    def total_gib(self) -> int:
        return self.disks * self.disk_gib


@dataclass(frozen=True)
class VmSize:
    """One VM size of vm_sizes.yaml `sizes`, with its GPU model's facts when it has GPUs."""

    name: str
    """The ARM size name, e.g. Standard_ND96isr_H100_v5."""
    series: str
    """A key of the table's `series` (the Microsoft size page read)."""
    vcpus: int
    memory_gib: int
    temp_disk_gib: int
    """The local temp (resource) disk; 0: none."""
    quota_family: str | None
    """The vCPU quota family (`az vm list-usage` name.value); None: not published."""
    encryption_at_host: bool | None
    """True where the Resource SKUs API was seen to say so; None: not published."""
    gpus: int = 0
    """GPUs per VM (1 for a partial GPU); 0: none."""
    gpu_fraction: str | None = None
    """The share of one GPU a partial size gets (e.g. "1/3"); None: whole GPUs."""
    gpu: GpuModel | None = None
    """The GPU model's facts; None for a size without GPUs."""
    gpu_memory_gb: int | None = None
    """GPU memory per GPU this size gets: the model's, or the size's own share of a partial GPU."""
    nvme: NvmeDisks | None = None
    cache_gib: int | None = None
    """The cache disk; None: not published (or not listed, see cache_listed)."""
    cache_listed: bool = False
    """Whether the row gives cacheGib at all (listed as null: not published; not listed: not applicable)."""
    ephemeral_placement: str | None = None
    """Where AKS puts an ephemeral OS disk: CacheDisk, ResourceDisk, NvmeDisk; None: not published."""
    accelerated_networking: bool | None = None
    infiniband: str | None = None
    """The RDMA fabric per GPU (e.g. "400 Gb/s NDR"); None: no InfiniBand."""
    burstable: bool = False
    retired: datetime.date | None = None
    replacement: str | None = None
    """The size to move to, for a retired size."""
    cpu_architecture: str | None = None
    """"Arm64" for the Grace sizes; None: x64."""
    row: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The table's row as written, with the GPU model's facts (what `aksgpu vm-sizes --json` prints)."""

    @property
    def gpu_model(self) -> str | None:
        """The GPU model's name (a key of gpuModels); None without GPUs."""
        return self.gpu.name if self.gpu else None

    @property
    def vendor(self) -> str | None:
        return self.gpu.vendor if self.gpu else None

    @property
    def mig(self) -> bool:
        """Whether AKS can split this size's GPUs with MIG (never a partial GPU)."""
        return bool(self.gpu and self.gpu.mig_profiles) and self.gpu_fraction is None

    @property
    def mig_profiles(self) -> Mapping[str, str]:
        return self.gpu.mig_profiles if self.gpu else {}


def gpu_models_of(table: Mapping[str, Any]) -> dict[str, GpuModel]:
    """Every GPU model of the table, typed; a missing or unknown key fails naming the model."""
    models = {}
    for name, facts in table["gpuModels"].items():
        _keys(f"gpuModels.{name}", facts, GPU_MODEL_KEYS, GPU_MODEL_KEYS)
        models[name] = GpuModel(name=name, vendor=facts["vendor"], architecture=facts["architecture"],
                                memory_gb=facts["memoryGb"], mig_profiles=dict(facts["mig"] or {}),
                                bf16_dense_tflops=facts["bf16DenseTflops"], fp16_dense_tflops=facts["fp16DenseTflops"],
                                memory_bandwidth_tbs=facts["memoryBandwidthTBs"], peak_source=facts["peakSource"])
    return models


def vm_sizes_of(table: Mapping[str, Any]) -> dict[str, VmSize]:
    """Every size of the table, typed; a missing, unknown or inconsistent fact fails naming the size."""
    models = gpu_models_of(table)
    return {name: _size(name, facts, models) for name, facts in table["sizes"].items()}


def _keys(where: str, facts: Mapping[str, Any], allowed: set[str], required: set[str]) -> None:
    if unknown := sorted(set(facts) - allowed):
        raise ValueError(f"vm_sizes.yaml {where}: unknown keys {unknown} (known: {sorted(allowed)})")
    if missing := sorted(required - set(facts)):
        raise ValueError(f"vm_sizes.yaml {where}: missing {missing} (null where no public source gives it)")


def _size(name: str, facts: Mapping[str, Any], models: Mapping[str, GpuModel]) -> VmSize:
    _keys(f"sizes.{name}", facts, SIZE_KEYS, REQUIRED_SIZE_KEYS)
    model = models.get(facts.get("gpuModel", ""))
    if ("gpuModel" in facts) != bool(facts.get("gpus")) or ("gpuModel" in facts and model is None):
        raise ValueError(f"vm_sizes.yaml sizes.{name}: a GPU size names gpus and a gpuModel of gpuModels; "
                         f"a size without GPUs names neither")
    row = dict(facts)
    if model is not None:
        row.setdefault("gpuMemoryGb", model.memory_gb)
        row.update(vendor=model.vendor, architecture=model.architecture,
                   mig=bool(model.mig_profiles) and "gpuFraction" not in facts,
                   migProfiles=dict(model.mig_profiles))
    nvme = facts.get("nvme")
    return VmSize(
        name=name, series=facts["series"], vcpus=facts["vcpus"], memory_gib=facts["memoryGib"],
        temp_disk_gib=facts["tempDiskGib"], quota_family=facts["quotaFamily"],
        encryption_at_host=facts["encryptionAtHost"], gpus=int(facts.get("gpus") or 0),
        gpu_fraction=facts.get("gpuFraction"), gpu=model, gpu_memory_gb=row.get("gpuMemoryGb"),
        nvme=NvmeDisks(nvme["disks"], nvme["diskGib"]) if nvme else None,
        cache_gib=facts.get("cacheGib"), cache_listed="cacheGib" in facts,
        ephemeral_placement=facts.get("ephemeralPlacement"),
        accelerated_networking=facts.get("acceleratedNetworking"), infiniband=facts.get("infiniband"),
        burstable=bool(facts.get("burstable")), retired=facts.get("retired"), replacement=facts.get("replacement"),
        cpu_architecture=facts.get("cpuArchitecture"), row=row)
