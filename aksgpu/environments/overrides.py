"""How an environment's overrides become its spec: the deep merge of preset, `defaults.overrides`
and the environment's own overrides (lists of named items merge by name, `_remove: true` drops
one), override keys checked against the spec's fields at the path the user wrote, and `--set
PATH=VALUE` assignments turned into overrides.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel

from aksgpu.environments.file import REMOVE_KEY
from aksgpu.errors import Problem, UserError
from aksgpu.spec.base import Issue, did_you_mean, fields_by_alias

# --- merging ---------------------------------------------------------------------------------


def merge(base: Any, override: Any) -> Any:
    """`override` deep-merged onto `base`, neither changed.

    Mappings merge key by key. Lists of keyed items (every item a mapping with a `name`, a
    `schedule` for maintenance windows, a `rule` for policy waivers) merge item by item by key: new
    keys are appended and
    `_remove: true` drops an item. Anything else in the override replaces the base value.
    """
    if isinstance(base, dict) and isinstance(override, dict):
        merged = dict(base)
        for key, value in override.items():
            if key != REMOVE_KEY:
                merged[key] = merge(base[key], value) if key in base else _strip_removals(value)
        return merged
    item_key = list_item_key(base)
    if item_key is not None and list_item_key(override) == item_key:
        merged_items = {item[item_key]: item for item in base}
        for item in override:
            key = item[item_key]
            if item.get(REMOVE_KEY) is True:
                merged_items.pop(key, None)
            elif key in merged_items:
                merged_items[key] = merge(merged_items[key], item)
            else:
                merged_items[key] = _strip_removals(item)
        return list(merged_items.values())
    return _strip_removals(override)


# Fields that identify an item in a list of mappings, so overrides can address it (policy
# waivers by their rule: one waiver per rule).
LIST_ITEM_KEYS = ("name", "schedule", "rule")


def list_item_key(value: Any) -> str | None:
    """The field that keys every item of a list of mappings, or None for other values."""
    if not isinstance(value, list) or not value or not all(isinstance(item, dict) for item in value):
        return None
    for key in LIST_ITEM_KEYS:
        if all(isinstance(item.get(key), str) for item in value):
            return key
    return None


def _strip_removals(value: Any) -> Any:
    """A value with removal markers dropped: removing what the base does not have is a no-op."""
    if isinstance(value, dict):  # `_remove: false` keeps an item: the marker goes either way
        return {key: _strip_removals(item) for key, item in value.items() if key != REMOVE_KEY}
    if isinstance(value, list):
        return [_strip_removals(item) for item in value
                if not (isinstance(item, dict) and item.get(REMOVE_KEY) is True)]
    return value


# --- override paths --------------------------------------------------------------------------


def check_override_keys(overrides: Any, where: str) -> list[Issue]:
    """Unknown keys in an overrides mapping, with the path the user wrote and a suggestion.

    Values are checked later, on the merged spec; this catches misspelt paths at their source.
    """
    from aksgpu.spec import ClusterSpec

    issues: list[Issue] = []
    if not isinstance(overrides, dict):
        return [Issue(where, overrides, "overrides must be a mapping of cluster spec fields",
                      "write them as YAML, e.g. controlPlane: {tier: Premium}")]
    _walk_keys(overrides, ClusterSpec, where, issues)
    return issues


def _walk_keys(value: Any, model: type[BaseModel], path: str, issues: list[Issue]) -> None:
    from aksgpu.spec.base import _model_in

    fields = fields_by_alias(model)
    for key, item in value.items():
        if key == REMOVE_KEY:
            continue
        info = fields.get(key)
        if info is None:
            fix = did_you_mean(str(key), fields) + "use one of: " + ", ".join(fields)
            issues.append(Issue(f"{path}.{key}", item, f"is not a field of {model.__name__}", fix))
            continue
        inner = _model_in(info.annotation)
        if inner is None:
            continue
        if isinstance(item, dict) and _annotation_is_list(info):
            item_key: str | None = next((k for k in LIST_ITEM_KEYS if inner is not None and k in inner.model_fields),
                                        "name")
            issues.append(Issue(f"{path}.{key}", item, f"{key} is a list, each item a mapping with its {item_key}",
                                f"write it as a list: {key}: [{{{item_key}: ..., ...}}]"))
            continue
        if isinstance(item, dict):
            _walk_keys(item, inner, f"{path}.{key}", issues)
        elif isinstance(item, list):
            item_key = list_item_key(item)
            for index, element in enumerate(item):
                if isinstance(element, dict):
                    where = f"[{item_key}={element[item_key]}]" if item_key else f"[{index}]"
                    _walk_keys(element, inner, f"{path}.{key}{where}", issues)


def check_override_items(base: Any, overrides: Any, where: str) -> list[Issue]:
    """Overrides that name nothing, with the path the user wrote: `_remove: true` on an item the
    base does not have, the same item twice in one list, and `_remove` outside a list item."""
    issues: list[Issue] = []
    if isinstance(overrides, dict):
        if REMOVE_KEY in overrides:
            issues.append(Issue(f"{where}.{REMOVE_KEY}", overrides[REMOVE_KEY],
                                f"{REMOVE_KEY} removes an item of a list of named items (nodePools, teams, "
                                "subnets, maintenance windows); it means nothing here",
                                f"delete {REMOVE_KEY}, or set the fields you want instead"))
        base_map = base if isinstance(base, dict) else {}
        for key, value in overrides.items():
            if key != REMOVE_KEY:
                issues += check_override_items(base_map.get(key), value, f"{where}.{key}")
        return issues
    item_key = list_item_key(overrides)
    base_key = list_item_key(base)
    if item_key is None and base_key is not None and isinstance(overrides, list):
        # A list of named items in which one item has no name replaces the base's whole list.
        for index, item in enumerate(overrides):
            if isinstance(item, dict) and not isinstance(item.get(base_key), str):
                issues.append(Issue(f"{where}[{index}].{base_key}", item.get(base_key),
                                    f"every item of this list needs a {base_key} (text) that says which item it "
                                    "changes, adds or removes; a list with an unnamed item would replace the "
                                    "preset's whole list", f"add {base_key}: to the item, quoted if it is a number"))
        return issues
    if item_key is None:
        return issues
    base_items = {item[item_key]: item for item in base} if base_key == item_key else {}
    seen: dict[str, int] = {}
    for index, item in enumerate(overrides):
        name = item[item_key]
        path = f"{where}[{item_key}={name}]"
        if name in seen:
            issues.append(Issue(path, name, f"this list names \"{name}\" twice (items {seen[name]} and {index}); "
                                "the second would silently win", "merge the two entries into one"))
            continue
        seen[name] = index
        remove = item.get(REMOVE_KEY, False)
        if not isinstance(remove, bool):
            issues.append(Issue(f"{path}.{REMOVE_KEY}", remove, f"{REMOVE_KEY} is true or absent",
                                f"write {REMOVE_KEY}: true to drop the item, or delete the key"))
        elif remove and name not in base_items:
            issues.append(Issue(f"{path}.{REMOVE_KEY}", True, f'there is no item named "{name}" to remove',
                                _did_you_mean(name, list(base_items))))
        elif remove and len(item) > 2:
            issues.append(Issue(f"{path}.{REMOVE_KEY}", True, "an item that is removed takes no other fields",
                                f"keep only {item_key} and {REMOVE_KEY}, or drop {REMOVE_KEY} to change the item"))
        else:
            rest = {k: v for k, v in item.items() if k not in (item_key, REMOVE_KEY)}
            issues += check_override_items(base_items.get(name), rest, path)
    return issues


_PATH_SEGMENT = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def user_path(path: str, merged: Any, layers: list[tuple[str, Any]], missing: bool = False) -> str:
    """Where the user wrote the value at `path` of the merged spec (`nodePools[2].maxCount`):
    the first layer (prefix, overrides), most specific first, that sets it, as
    `<prefix>.nodePools[name=a100].maxCount`. A value no layer sets comes from the preset or
    the spec's defaults: its path, with list items by name. A `missing` value (a required field
    left out) belongs to the innermost list item a layer wrote, if any."""
    segments = _segments(path, merged)
    if not segments:
        return path
    for prefix, overrides in layers:
        located = _locate(segments, merged, overrides)
        if located is not None:
            return f"{prefix}.{located}"
    if missing:
        for cut in range(len(segments) - 1, 0, -1):
            if not isinstance(segments[cut - 1], int):
                continue
            for prefix, overrides in layers:
                located = _locate(segments[:cut], merged, overrides)
                if located is not None:
                    tail = "".join(f"[{s}]" if isinstance(s, int) else f".{s}" for s in segments[cut:])
                    return f"{prefix}.{located}{tail}"
    return _locate(segments, merged, None) or path


def _segments(path: str, merged: Any) -> list[str | int]:
    """`a.b[0].c` as ['a', 'b', 0, 'c'], keeping keys that hold dots (tags.example.com/team)
    whole where the merged spec has them."""
    tokens: list[str | int] = [name if name else int(number) for name, number in _PATH_SEGMENT.findall(path)]
    segments: list[str | int] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if isinstance(token, str) and isinstance(merged, dict):
            end = index + 1
            for stop in range(len(tokens), index + 1, -1):
                words = tokens[index:stop]
                if all(isinstance(word, str) for word in words) and ".".join(map(str, words)) in merged:
                    end = stop
                    break
            key = ".".join(map(str, tokens[index:end]))
            segments.append(key)
            merged = merged.get(key)
            index = end
            continue
        segments.append(token)
        merged = merged[token] if isinstance(merged, list) and isinstance(token, int) and token < len(merged) \
            else None
        index += 1
    return segments


def _locate(segments: list[str | int], merged: Any, overrides: Any) -> str | None:
    """The user's path for `segments` in `overrides` (None: not set there); with overrides=None,
    the merged spec's path with list items by name."""
    only_merged = overrides is None
    text = ""
    for segment in segments:
        if isinstance(segment, str):
            text += f".{segment}"
            merged = merged.get(segment) if isinstance(merged, dict) else None
            if not only_merged:
                if not isinstance(overrides, dict) or segment not in overrides:
                    return None
                overrides = overrides[segment]
            continue
        item_key = list_item_key(merged)
        if item_key is None or segment >= len(merged):
            text += f"[{segment}]"
            merged = merged[segment] if isinstance(merged, list) and segment < len(merged) else None
            if not only_merged:
                if not isinstance(overrides, list) or segment >= len(overrides):
                    return None
                overrides = overrides[segment]  # a list that replaced the base's, item for item
            continue
        name = merged[segment][item_key]
        text += f"[{item_key}={name}]"
        merged = merged[segment]
        if not only_merged:
            if list_item_key(overrides) != item_key:
                return None
            overrides = next((item for item in overrides if item[item_key] == name), None)
            if overrides is None:
                return None
    return text.removeprefix(".")


# --- `--set path=value` ----------------------------------------------------------------------


def parse_assignment(text: str) -> tuple[list[str], Any]:
    """`controlPlane.tier=Premium` -> (['controlPlane', 'tier'], 'Premium'); values are YAML."""
    from aksgpu.project.yaml_input import YamlProblem, parse_yaml

    path_text, sep, value_text = text.partition("=")
    segments = path_text.strip().split(".")
    if not sep or not all(segments):
        raise UserError(problems=[Problem("--set", text, "must be PATH=VALUE with a dotted path",
                                          "write it like --set controlPlane.tier=Premium or "
                                          "--set nodePools.gpu.maxCount=8")])
    try:
        value = parse_yaml(value_text) if value_text.strip() else ""
    except YamlProblem as problem:
        raise UserError(problems=[Problem(
            "--set", text, f"the value is not valid YAML: {problem.rule}",
            f"{problem.fix} (a text value in quotes: --set 'tags.team=\"ml\"')")]) from None
    return segments, value


def assignment_overrides(assignments: list[str], base: dict[str, Any] | None = None) -> dict[str, Any]:
    """Overrides from `--set` assignments; list items are addressed by name (nodePools.<name>.field).

    `base` is the spec the overrides apply to: naming a list item it does not have is an error
    (--set changes items; a new item needs all its fields, in environments.yaml).
    """
    from aksgpu.spec import ClusterSpec
    from aksgpu.spec.base import _model_in

    overrides: dict[str, Any] = {}
    for text in assignments:
        segments, value = parse_assignment(text)
        model: type[BaseModel] | None = ClusterSpec
        node: dict[str, Any] = overrides
        base_node: Any = base
        index = 0
        while index < len(segments):
            key = segments[index]
            last = index == len(segments) - 1
            fields = fields_by_alias(model) if model else {}
            info = fields.get(key) if model else None
            if model is not None and info is None:
                prefix = ".".join(segments[:index]) or "(top level)"
                raise UserError(problems=[Problem("--set", text, f'"{key}" is not a field at {prefix}',
                                                  f"{did_you_mean(key, fields)}use one of: {', '.join(fields)}")])
            inner = _model_in(info.annotation) if info is not None else None
            item_key = next((k for k in LIST_ITEM_KEYS if inner is not None and k in inner.model_fields), None)
            is_named_list = item_key is not None and _annotation_is_list(info)
            if last:
                if key in node:
                    raise UserError(problems=[Problem("--set", text, f"{'.'.join(segments)} is already set by an "
                                                      "earlier --set", "set it once")])
                node[key] = value
                break
            if is_named_list:
                item_name = segments[index + 1]
                if base is not None:
                    base_items = base_node.get(key) if isinstance(base_node, dict) else None
                    names = [i.get(item_key) for i in base_items or [] if isinstance(i, dict)]
                    if item_name not in names:
                        raise UserError(problems=[Problem(
                            "--set", text, f'there is no {key} item named "{item_name}" to change',
                            f"{_did_you_mean(item_name, names)}; a new item needs all its fields: add it under "
                            f"overrides.{key} in environments.yaml")])
                    base_node = next(i for i in base_items if isinstance(i, dict) and i.get(item_key) == item_name)  # type: ignore[union-attr]  # is_named_list: base_items is a list
                items = node.setdefault(key, [])
                item = next((i for i in items if i.get(item_key) == item_name), None)
                if item is None:
                    item = {item_key: item_name}
                    items.append(item)
                if index + 1 == len(segments) - 1:
                    raise UserError(problems=[Problem("--set", text, f"name a field of {key} item {item_name!r}",
                                                      f"write it like --set {key}.{item_name}.maxCount=8")])
                node, model, index = item, inner, index + 2
                continue
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise UserError(problems=[Problem("--set", text, f"{key} is set twice", "set the whole value once")])
            base_node = base_node.get(key) if isinstance(base_node, dict) else None
            model = inner
            index += 1
    return overrides


def _did_you_mean(name: str, names: list[Any]) -> str:
    known = [str(n) for n in names]
    return did_you_mean(name, known) + (f"use one of: {', '.join(known)}" if known else "there are none yet")


def _annotation_is_list(info: Any) -> bool:
    from typing import get_args, get_origin

    annotation = info.annotation
    if get_origin(annotation) is list:
        return True
    return any(get_origin(arg) is list for arg in get_args(annotation))


def describe_overrides(overrides: dict[str, Any], base: Any = None, prefix: str = "") -> list[str]:
    """The dotted paths an overrides mapping sets on `base`, for headers: list items by key,
    `(added)` for items `base` does not have, `(removed)` for removals."""
    paths: list[str] = []
    base = base if isinstance(base, dict) else {}
    for key, value in overrides.items():
        path = f"{prefix}.{key}" if prefix else key
        item_key = list_item_key(value)
        if isinstance(value, dict) and value:
            paths += describe_overrides(value, base.get(key), path)
        elif item_key is not None:
            base_items = {item.get(item_key): item for item in base.get(key) or [] if isinstance(item, dict)}
            for item in value:
                item_path = f"{path}.{item[item_key]}"
                rest = {k: v for k, v in item.items() if k != item_key}
                if item.get(REMOVE_KEY) is True:
                    paths.append(f"{item_path} (removed)")
                elif item[item_key] not in base_items:
                    paths.append(f"{item_path} (added)")
                else:
                    paths += describe_overrides(rest, base_items[item[item_key]], item_path)
        else:
            paths.append(path)
    return paths
