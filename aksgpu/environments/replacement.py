"""What a re-render would make Azure replace, or silently not apply: the stack file on disk next to
what `render` would now write, compared on the fields Azure cannot change in place
(catalog/replacement.yaml, one table with its sources).

An aksgpu upgrade can change preset defaults; a re-render then moves such a field without anyone
editing environments.yaml, and the next `aksgpu up` replaces the cluster or a pool. `render`
refuses those without --allow-replace and prints, for each field, the override that keeps today's
value. System pool fields are read by AKS at create only: a change there is a note, not a refusal.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml

from aksgpu import catalog
from aksgpu.environments.overrides import list_item_key
from aksgpu.stack_config import CLUSTER_KEY, FLEET_KEY

MISSING = object()


@dataclass(frozen=True)
class FieldChange:
    """One spec field whose value differs between the stack file on disk and the re-render."""

    path: tuple[str, ...]  # spec path; a list item is named by its `name`, like --set paths
    old: Any
    new: Any
    resource: str = ""
    azure_field: str = ""
    section: str = "overrides"  # where environments.yaml sets the field: an environment's overrides, or its fleet

    @property
    def dotted(self) -> str:
        return ".".join(self.path)

    def line(self) -> str:
        where = f"{self.resource} {self.azure_field}: " if self.resource else ""
        return f"{where}{self.dotted}: {_show(self.old)} -> {_show(self.new)}"


@dataclass(frozen=True)
class RenderImpact:
    """The re-render's changes that replace a resource, and those that are not applied."""

    replaced: tuple[FieldChange, ...] = ()
    not_applied: tuple[FieldChange, ...] = ()  # system pool fields: only a new cluster reads them


def _show(value: Any) -> str:
    if value is MISSING:
        return "(absent)"
    return yaml.safe_dump(value, default_flow_style=True, width=10_000).strip().removesuffix("...").strip()


def cluster_of(document: Any) -> Any:
    return config_value(document, CLUSTER_KEY)


def config_value(document: Any, key: str) -> Any:
    config = document.get("config") if isinstance(document, dict) else None
    return config.get(key) if isinstance(config, dict) else None


def render_impact(old_document: Any, new_document: Any) -> RenderImpact:
    """Compare two stack file documents' `aksgpu:cluster` specs on the fields of the table (or, for a
    fleet's shared stack, their `aksgpu:fleet` specs on the table's fleet rows)."""
    table = catalog.load("replacement")
    old_fleet, new_fleet = config_value(old_document, FLEET_KEY), config_value(new_document, FLEET_KEY)
    if isinstance(old_fleet, dict) and isinstance(new_fleet, dict):
        return RenderImpact(tuple(FieldChange(path, before, after, *_row(table["fleetReplaced"][pattern]), "fleet")
                                  for pattern in table["fleetReplaced"]
                                  for path, before, after in _changes(pattern, old_fleet, new_fleet)))
    old, new = cluster_of(old_document), cluster_of(new_document)
    if not isinstance(old, dict) or not isinstance(new, dict):
        return RenderImpact()
    in_place = table.get("inPlaceWhen", {})
    replaced = [FieldChange(path, before, after, *_row(table["replaced"][pattern]))
                for pattern in table["replaced"] if not _holds_in_both(in_place.get(pattern), old, new)
                for path, before, after in _changes(pattern, old, new)]
    not_applied = [FieldChange(path, before, after)
                   for pattern in table["notApplied"] for path, before, after in _leaf_changes(
                       (pattern,), old.get(pattern, MISSING), new.get(pattern, MISSING))]
    return RenderImpact(tuple(replaced), tuple(not_applied))


def _holds_in_both(condition: dict[str, Any] | None, old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether a row's in-place condition (inPlaceWhen) holds in both specs."""
    if condition is None:
        return False
    return all(_at(spec, condition["when"]) == condition["equals"] for spec in (old, new))


def _at(spec: Any, dotted: str) -> Any:
    for segment in dotted.split("."):
        spec = spec.get(segment, MISSING) if isinstance(spec, dict) else MISSING
    return spec


def _row(row: list[Any]) -> tuple[str, str]:
    resource, fields = row
    return resource, " / ".join(fields) if isinstance(fields, list) else fields


def _changes(pattern: str, old: Any, new: Any) -> Iterator[tuple[tuple[str, ...], Any, Any]]:
    """(path, old, new) for each value at `pattern` that both specs have and that differs; a list
    item only one side has (a pool added or removed) is no replacement."""
    def walk(segments: list[str], path: tuple[str, ...], a: Any, b: Any) -> Iterator[tuple[tuple[str, ...], Any, Any]]:
        if not segments:
            if a != b:
                yield path, a, b
            return
        head, rest = segments[0], segments[1:]
        if head.endswith("[]"):
            key = head[:-2]
            items_a, items_b = _items(a.get(key) if isinstance(a, dict) else None), \
                _items(b.get(key) if isinstance(b, dict) else None)
            for name in items_a.keys() & items_b.keys():
                yield from walk(rest, (*path, key, name), items_a[name], items_b[name])
            return
        if isinstance(a, dict) and isinstance(b, dict) and head in a and head in b:
            yield from walk(rest, (*path, head), a[head], b[head])

    segments = pattern.replace("[].", "[]\0").replace(".", "\0").split("\0")
    yield from sorted(walk(segments, (), old, new), key=lambda change: change[0])


def _items(value: Any) -> dict[str, Any]:
    key = list_item_key(value)
    return {item[key]: item for item in value} if key == "name" else {}


def _leaf_changes(path: tuple[str, ...], a: Any, b: Any) -> Iterator[tuple[tuple[str, ...], Any, Any]]:
    """Each changed leaf under path (dicts walked key by key; anything else compared whole)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(a.keys() | b.keys()):
            yield from _leaf_changes((*path, key), a.get(key, MISSING), b.get(key, MISSING))
    elif a != b:
        yield path, a, b


def keep_override(environment: str, changes: tuple[FieldChange, ...]) -> str:
    """The environments.yaml snippet that keeps each field's value on disk (list items by name,
    which is how overrides merge them: environments/overrides.py merge); a fleet's fields under the
    environment's `fleet:`."""
    sections: dict[str, dict[str, Any]] = {}
    for change in changes:
        _set(sections.setdefault(change.section, {}), list(change.path), None if change.old is MISSING else change.old)
    snippet = {"environments": {environment: {name: _as_yaml(values) for name, values in sections.items()}}}
    return yaml.safe_dump(snippet, sort_keys=False, default_flow_style=False, width=100)


def _set(target: dict[str, Any], path: list[str], value: Any) -> None:
    node = target
    for segment in path[:-1]:
        node = node.setdefault(segment, {})
    node[path[-1]] = value


def _as_yaml(overrides: dict[str, Any]) -> dict[str, Any]:
    """nodePools (a list keyed by name in the spec) back to a list of items."""
    result: dict[str, Any] = {}
    for key, value in overrides.items():
        if key == "nodePools" and isinstance(value, dict):
            result[key] = [{"name": name, **fields} for name, fields in value.items()]
        elif isinstance(value, dict):
            result[key] = _as_yaml(value)
        else:
            result[key] = value
    return result


# What a replacement of each kind of resource loses, for the refusal's message.
_LOST = {"Registry": "a new registry holds none of the images", "Vault": "a new vault holds none of the keys KMS and "
         "the disk encryption set use", "Fleet": "a new fleet: every member joins it again, its update runs start over"}


def _what_goes(changes: tuple[FieldChange, ...]) -> str:
    kinds = dict.fromkeys(_LOST.get(change.resource, "a new cluster or pool: its nodes and workloads go")
                          for change in changes)
    return "; ".join(kinds)


def refusal(environment: str, file_name: str, changes: tuple[FieldChange, ...]) -> str:
    """The message of a render that would replace resources."""
    lines = "\n".join(f"  - {change.line()}" for change in changes)
    snippet = "\n".join(f"    {line}" for line in keep_override(environment, changes).splitlines())
    return (f"{file_name}: re-rendering would change {len(changes)} field(s) Azure cannot change in place, so the "
            f"next `aksgpu up {environment}` replaces these resources ({_what_goes(changes)}):\n{lines}\n"
            f"Fix: to keep today's values, add to stacks/environments.yaml (merge it into "
            f"environment {environment}'s {' and '.join(dict.fromkeys(change.section for change in changes))}) "
            f"and render again:\n{snippet}\n"
            f"or, to replace them on purpose, run `aksgpu render {environment} --allow-replace`.")


def system_pool_note(environment: str, changes: tuple[FieldChange, ...]) -> str:
    fields = ", ".join(f"{change.dotted} ({_show(change.old)} -> {_show(change.new)})" for change in changes)
    return (f"note: environment {environment}: {fields} take effect only on a new cluster. AKS reads the system "
            "pool at create only and aksgpu ignores later changes to it (agentPoolProfiles), so an existing "
            "cluster keeps its system pool. To change it there: add a new system pool (`az aks nodepool add "
            "--mode System`), move the system workloads, then delete the old one.")
