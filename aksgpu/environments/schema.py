"""JSON Schemas of the cluster spec and of environments.yaml, for editors and CI checks."""

from __future__ import annotations

import copy
from typing import Any

from aksgpu.environments.file import REMOVE_KEY
from aksgpu.environments.overrides import LIST_ITEM_KEYS
from aksgpu.stack_config import CLUSTER_KEY

DRAFT = "https://json-schema.org/draft/2020-12/schema"


def cluster_schema() -> dict[str, Any]:
    """The schema of the `aksgpu:cluster` value in a stack file."""
    from aksgpu.spec import ClusterSpec

    schema = ClusterSpec.model_json_schema(by_alias=True)
    return {"$schema": DRAFT, "title": f"aksgpu cluster spec ({CLUSTER_KEY})", **schema}


def environments_schema() -> dict[str, Any]:
    """The schema of stacks/environments.yaml; `overrides` are partial cluster specs."""
    from aksgpu.environments.file import EnvironmentsDocument

    document = EnvironmentsDocument.model_json_schema(by_alias=True)
    from aksgpu.spec import ClusterSpec

    overrides = _partial(ClusterSpec.model_json_schema(by_alias=True))
    defs = document.setdefault("$defs", {})
    for name, definition in overrides.pop("$defs", {}).items():
        if name in defs:
            raise ValueError(f"schema definition {name} is defined twice")  # a programming error
        defs[name] = definition
    overrides["title"] = "Cluster spec overrides"
    defs["ClusterSpecOverrides"] = overrides
    for definition in (defs["Defaults"], defs["EnvironmentSettings"]):
        description = definition["properties"]["overrides"].get("description", "")
        definition["properties"]["overrides"] = {"$ref": "#/$defs/ClusterSpecOverrides", "description": description}
    return {"$schema": DRAFT, "title": "aksgpu environments (stacks/environments.yaml)", **document}


def _partial(schema: dict[str, Any]) -> dict[str, Any]:
    """A schema where no field is required and keyed list items may carry `_remove: true`."""
    partial = copy.deepcopy(schema)
    defs = partial.get("$defs", {})

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            node.pop("required", None)
            items = node.get("items") if node.get("type") == "array" else None
            if isinstance(items, dict) and "$ref" in items:
                item_schema = defs.get(items["$ref"].rsplit("/", 1)[-1], {})
                properties = item_schema.get("properties", {})
                if any(key in properties for key in LIST_ITEM_KEYS):
                    properties[REMOVE_KEY] = {"type": "boolean", "description":
                                              "true: drop the preset's item with this key instead of merging into it"}
            for value in list(node.values()):
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(partial)
    return partial
