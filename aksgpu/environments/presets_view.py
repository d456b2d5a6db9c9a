"""`aksgpu presets show`: a preset's effective spec as rows of field, value, source, description."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aksgpu.environments.fields import field_rows, is_set_by, paths_in
from aksgpu.environments.overrides import merge
from aksgpu.environments.presets import load_preset

# What `aksgpu init` fills in for every environment; placeholders here, so the spec validates.
INIT_PLACEHOLDERS: dict[str, Any] = {"name": "gpu-ENV", "location": "eastus2", "resourceGroup": {"name": "rg-gpu-ENV"}}


@dataclass(frozen=True)
class PresetRow:
    path: str
    value: Any
    source: str  # preset | default | init
    description: str


def preset_rows(name: str) -> list[PresetRow]:
    """Every field of the preset's effective spec; raises UserError for an unknown preset."""
    from aksgpu.environments.effective import spec_config
    from aksgpu.spec import parse_cluster_spec

    preset = load_preset(name, "PRESET argument")
    spec, _ = parse_cluster_spec(merge(INIT_PLACEHOLDERS, preset.spec), source=f"preset {name}")
    preset_paths = paths_in(preset.spec)
    init_paths = paths_in(INIT_PLACEHOLDERS)
    rows = []
    for row in field_rows(spec_config(spec)):
        if is_set_by(row.path, preset_paths):
            source = "preset"
        elif is_set_by(row.path, init_paths):
            source = "init"
        else:
            source = "default"
        rows.append(PresetRow(row.path, row.value, source, row.description))
    return rows
