"""Presets: partial cluster specs shipped with the CLI, one YAML file each, with comments that
explain their choices. An environment starts from one (stacks/environments.yaml)."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cli.yaml_input import parse_yaml

from cli.stackfile import UserError

PRESETS_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    spec: dict[str, Any]
    path: Path


def preset_names() -> list[str]:
    return sorted(path.stem for path in PRESETS_DIR.glob("*.yaml"))


def load_preset(name: str) -> Preset:
    """The preset `name`; an unknown name is a UserError that lists the known ones."""
    path = PRESETS_DIR / f"{name}.yaml"
    names = preset_names()
    if name not in names:
        guess = difflib.get_close_matches(name, names, n=1)
        hint = f'did you mean "{guess[0]}"? ' if guess else ""
        raise UserError(f'no preset "{name}". Fix: {hint}use one of: {", ".join(names)} (aksgpu presets list).')
    document = parse_yaml(path.read_text(encoding="utf-8"))
    return Preset(name, document["description"], document.get("spec") or {}, path)


def all_presets() -> list[Preset]:
    return [load_preset(name) for name in preset_names()]
