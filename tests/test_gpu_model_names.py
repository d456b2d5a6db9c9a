"""NVML device names of the Grace Blackwell GPUs map to the catalog's models (thresholds.yaml
nvmlNames). The GB300 names are the public ones cited beside nvmlNames: NVIDIA's NVML mock says
"NVIDIA GB300 NVL", runs on GB300 nodes print "NVIDIA GB300"."""

from __future__ import annotations

import pytest

from aksgpu import catalog
from aksgpu.node.gpu_check import thresholds


@pytest.mark.parametrize(("name", "model"), [
    ("NVIDIA GB300", "GB300"), ("NVIDIA GB300 NVL", "GB300"), ("NVIDIA GB200", "GB200"),
    ("NVIDIA B300", None), ("NVIDIA B200", None),
])
def test_grace_blackwell_names_map_to_their_models(name: str, model: str | None) -> None:
    assert thresholds.model_of(name) == model
    assert model is None or model in catalog.gpu_models()


def test_every_gpu_model_of_a_current_size_is_named_or_says_why_not() -> None:
    table = thresholds.table()
    models = {size.gpu.name for size in catalog.vm_sizes().values() if size.gpu and not size.retired}
    assert "GB300" in models and "GB300" in table["nvmlNames"] and "GB300" not in table["unnamedModels"]
    assert models <= set(table["nvmlNames"]) | set(table["unnamedModels"])
