"""Facts about Azure and AKS as data tables, each file with its source and retrieval date."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml

from aksgpu.catalog.images import PinnedImage, pinned_images_of
from aksgpu.catalog.vm import GpuModel, VmSize, gpu_models_of, vm_sizes_of

DATA_DIR = Path(__file__).resolve().parent
# libyaml's loader when PyYAML was built with it (the wheels are): the same tables, about ten times faster.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.cache
def load(name: str) -> dict[str, Any]:
    """The parsed table `name` (a file `<name>.yaml` beside this module)."""
    with (DATA_DIR / f"{name}.yaml").open(encoding="utf-8") as handle:
        return yaml.load(handle, Loader=_LOADER)  # noqa: S506 - a safe loader, C or Python


def text(file_name: str) -> str:
    """A data file that is not a table (e.g. the DCGM exporter's metric list), as text."""
    return (DATA_DIR / file_name).read_text(encoding="utf-8")


def vm_size(name: str) -> VmSize | None:
    """A VM size's facts (typed: catalog/vm.py), or None when aksgpu's table does not list it. A
    GPU size carries its GPU model's facts too (`gpu`), gpu_memory_gb (the size's own share for a
    partial GPU), and mig (whether AKS can split the GPU) with mig_profiles."""
    return vm_sizes().get(name)


@functools.cache
def vm_sizes() -> dict[str, VmSize]:
    """Every size of the table, as vm_size gives it, built once."""
    return vm_sizes_of(load("vm_sizes"))


def gpu_model(name: str) -> GpuModel | None:
    """A GPU model's facts (vm_sizes.yaml gpuModels), or None for a model the table does not list."""
    return gpu_models().get(name)


@functools.cache
def gpu_models() -> dict[str, GpuModel]:
    """Every GPU model of the table, built once."""
    return gpu_models_of(load("vm_sizes"))


@functools.cache
def pinned_images() -> dict[str, PinnedImage]:
    """The images aksgpu declares itself, with their digests (images.yaml, typed: catalog/images.py)."""
    return pinned_images_of(load("images"))


def image_reference(component: str, tag: str | None = None) -> str:
    """image:tag@digest of a component at its pinned tag (image:tag for another tag, or where the
    table has no digest)."""
    return pinned_images()[component].reference(tag)


def limit(key: str) -> Any:
    """One value of the AKS limits table."""
    return load("aks_limits")[key]


def role_id(role_name: str) -> str:
    """The GUID of a built-in Azure role."""
    return load("azure_roles")["roles"][role_name]


def mig_instances(profile: str) -> int:
    """GPU instances one GPU splits into under a MIG profile (the nvidia.com/gpu each GPU advertises)."""
    return int(load("vm_sizes")["migInstancesPerGpu"][profile])
