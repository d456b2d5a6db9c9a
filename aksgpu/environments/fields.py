"""The cluster spec as rows of (field path, value, description): for `presets show` and `diff`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from aksgpu.environments.overrides import list_item_key


@dataclass(frozen=True)
class FieldRow:
    path: str
    value: Any
    description: str


def field_rows(config: dict[str, Any], model: type[BaseModel] | None = None, prefix: str = "") -> list[FieldRow]:
    """Every leaf of a spec config (see render.spec_config), with its field's description.

    Items of keyed lists are addressed by key (`nodePools[a100].vmSize`), so rows of two specs
    line up by meaning, not by position.
    """
    from aksgpu.spec import ClusterSpec
    from aksgpu.spec.base import _model_in
    from aksgpu.spec.descriptions import field_descriptions

    model = model or ClusterSpec
    fields = {(info.alias or name): (name, info) for name, info in model.model_fields.items()}
    descriptions = field_descriptions(model)
    rows: list[FieldRow] = []
    for key, value in config.items():
        name, info = fields.get(key, (key, None))
        description = descriptions.get(name, "")
        inner = _model_in(info.annotation) if info else None
        path = f"{prefix}.{key}" if prefix else key
        item_key = list_item_key(value)
        if inner is not None and isinstance(value, dict):
            rows += field_rows(value, inner, path)
        elif inner is not None and item_key is not None:
            for item in value:
                rows += field_rows(item, inner, f"{path}[{item[item_key]}]")
        else:
            rows.append(FieldRow(path, value, description))
    return rows


def paths_in(raw: Any, prefix: str = "") -> set[str]:
    """The leaf paths a raw (partial) spec sets, in the same form as field_rows."""
    paths: set[str] = set()
    if isinstance(raw, dict):
        for key, value in raw.items():
            path = f"{prefix}.{key}" if prefix else key
            item_key = list_item_key(value)
            if isinstance(value, dict) and value:
                paths |= paths_in(value, path)
            elif item_key is not None:
                for item in value:
                    paths |= paths_in(item, f"{path}[{item[item_key]}]")
            else:
                paths.add(path)
    return paths


def is_set_by(path: str, raw_paths: set[str]) -> bool:
    """Whether `path` or one of its parents is a leaf that the raw spec sets."""
    parts = path.split(".")
    return any(".".join(parts[:n]) in raw_paths for n in range(1, len(parts) + 1))


ABSENT = "(absent)"
DEFINED = "(defined)"
_KEYED_PREFIX = re.compile(r"^.*?\[[^\]]+\]")


def field_differences(a: dict[str, Any], b: dict[str, Any], name_a: str, name_b: str) -> list[dict[str, Any]]:
    """Rows where two flattened specs differ; a keyed item (a pool, a team) that only one side
    has is one row, not one per field."""
    only: dict[str, str] = {}
    for this, other, side in ((a, b, name_a), (b, a, name_b)):
        other_prefixes = {m.group(0) for path in other if (m := _KEYED_PREFIX.match(path))}
        for path in this:
            match = _KEYED_PREFIX.match(path)
            if match and match.group(0) not in other_prefixes:
                only.setdefault(match.group(0), side)
    rows: list[dict[str, Any]] = []
    emitted: set[str] = set()
    for path in dict.fromkeys([*a, *b]):
        match = _KEYED_PREFIX.match(path)
        if match and match.group(0) in only:
            prefix = match.group(0)
            if prefix not in emitted:
                emitted.add(prefix)
                side = only[prefix]
                rows.append({"path": prefix, name_a: DEFINED if side == name_a else ABSENT,
                             name_b: DEFINED if side == name_b else ABSENT})
            continue
        if a.get(path, ABSENT) != b.get(path, ABSENT):
            rows.append({"path": path, name_a: a.get(path, ABSENT), name_b: b.get(path, ABSENT)})
    return rows
