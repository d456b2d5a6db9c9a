"""Presets: partial cluster specs shipped with the CLI, one YAML file each, with comments that
explain their choices. An environment starts from one (stacks/environments.yaml)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aksgpu.errors import Problem, UserError
from aksgpu.project.yaml_input import parse_yaml
from aksgpu.spec.base import did_you_mean

PRESETS_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    spec: dict[str, Any]
    path: Path


def preset_names() -> list[str]:
    return sorted(path.stem for path in PRESETS_DIR.glob("*.yaml"))


def load_preset(name: str, where: str = "preset", source: str | None = None) -> Preset:
    """The preset `name`; an unknown name is a UserError that lists the known ones (`where` and
    `source`: where the name was written, for the error)."""
    path = PRESETS_DIR / f"{name}.yaml"
    names = preset_names()
    if name not in names:
        raise UserError(problems=[Problem(where, name, "no preset of that name",
                                          f'{did_you_mean(name, names)}use one of: {", ".join(names)} '
                                          "(aksgpu presets list)", source=source)])
    document = parse_yaml(path.read_text(encoding="utf-8"))
    return Preset(name, document["description"], document.get("spec") or {}, path)


def all_presets() -> list[Preset]:
    return [load_preset(name) for name in preset_names()]
