"""Oracle: validate ManagedCluster / AgentPool request bodies against Azure's own OpenAPI spec.

The spec (Swagger 2.0, copied unchanged from Azure/azure-rest-api-specs) lives outside the
repository under ``<shared>/specs/azure-rest-api/``; ``<shared>/specs/README.md`` describes how a
Pulumi input maps onto the ARM request body.  Every rule enforced here is read from the spec:
nothing about AKS is hand-written, so the oracle stays independent of the code under test.

A small recursive validator is used instead of ``jsonschema`` because the rules differ from plain
JSON Schema in several ways that would each need a custom keyword there: ``allOf`` parts must be
merged before "unknown property" can be decided, ``readOnly`` properties are errors when sent,
``$ref`` siblings such as ``readOnly`` are honoured (AutoRest semantics), integral floats are
integers, and the plan placeholders below are accepted anywhere.

Decisions worth knowing:
* A placeholder stands in for a *value*: the key that carries it is still checked (an unknown
  or readOnly property is an error even when its value is UNKNOWN).
* Path parameters are ``required: true`` in the spec, so a missing resourceName/agentPoolName is
  reported (the plan should carry the name, or UNKNOWN, rather than rely on auto-naming).
* ``None`` is not a JSON value Swagger 2.0 allows (no ``x-nullable`` here), so it is a type error;
  Pulumi drops None inputs before they reach the wire.

Spec quirks handled generically:
* ``$ref`` paths climb six levels (``../../../../../../common-types``); every ``$ref`` is resolved
  relative to the file that contains it, so the exact depth does not matter.
* ``$ref`` with sibling keywords (``readOnly``, ``type``, ``default``): Swagger 2.0 says siblings
  are ignored, but Azure specs rely on them (e.g. ``systemData``, ``powerState``), so a ``$ref``
  node is treated as ``allOf: [target, siblings]``.
* A property that is both ``required`` and ``readOnly`` could never be satisfied by a request;
  such a property is not demanded (AutoRest does the same).  None exists in 2025-09-01.
* ``ManagedClusterAgentPoolProfileProperties.eTag`` says "read-only" in its description but is not
  marked ``readOnly``, so it is accepted (we follow the schema, not prose).
* Three of the seven examples (e.g. ManagedClustersCreate_Update.json) send ``sku.name: "Basic"``,
  a value the 2025-09-01 enum no longer lists (it is ``Base``/``Automatic``).  The enum is
  ``modelAsString: true``, which Azure's example validation tolerates; this oracle still reports
  it (a plan sending "Basic" would be a real bug) but tags the problem with
  ``EXTENSIBLE_ENUM_NOTE`` so tests over the examples can tolerate exactly that class.
* ``ManagedClusterAgentPoolProfileProperties.count`` states "0 to 1000" only in prose (no
  ``maximum``), so count 1001 is not an error for this oracle; ``osDiskSizeGB`` has 0..2048.
* ``format`` (int32, arm-id, uuid, date-time...) is not checked: the brief does not ask for it and
  Azure's formats are loosely applied in its own examples.
"""

from __future__ import annotations

import functools
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable
from urllib.parse import unquote

# Placeholders the project's offline plan writes where a value is only known after apply or is
# secret.  Such a value is accepted by every schema, at any depth (also as a whole object/list).
UNKNOWN = "(known after apply)"
SECRET = "[secret]"
_PLACEHOLDERS = (UNKNOWN, SECRET)
# Appended to enum problems whose x-ms-enum says `modelAsString: true` (an "extensible" enum),
# so callers can tell them apart: Azure's own example validation does not enforce those, and some
# of the spec's examples rely on that (see ManagedClustersCreate_Update.json, sku.name "Basic").
EXTENSIBLE_ENUM_NOTE = "(enum, x-ms-enum modelAsString: true)"

_SPEC_RELPATH = (
    "specs/azure-rest-api/containerservice/resource-manager/Microsoft.ContainerService/"
    "aks/stable/2025-09-01/managedClusters.json"
)
# operationIds of the two PUTs whose bodies the project sends.
_MC_OPERATION = "ManagedClusters_CreateOrUpdate"
_AP_OPERATION = "AgentPools_CreateOrUpdate"
# Path parameters the provider fills itself (not Pulumi inputs): never validated here.
_IMPLICIT_PATH_PARAMS = frozenset({"subscriptionId"})
# specs/README.md: these ManagedCluster inputs stay at the top of the body; all others go under
# `properties`.  (For AgentPool every non-path input goes under `properties`.)
_MC_TOP_LEVEL = frozenset({"location", "tags", "sku", "identity", "extendedLocation", "kind"})
# Keys of a Swagger 2.0 non-body parameter that are not schema constraints.
_PARAM_META = frozenset({"name", "in", "required", "description", "x-ms-parameter-location"})

_Node = tuple[Path, dict]  # a schema together with the file its $refs are relative to


@dataclass
class _View:
    """A schema with its `$ref`/`allOf` chain merged: what a value at that place must satisfy."""

    parts: list[dict] = field(default_factory=list)  # every schema dict contributing keywords
    properties: dict[str, list[_Node]] = field(default_factory=dict)
    required: list[str] = field(default_factory=list)
    additional: list[_Node] = field(default_factory=list)  # schemas for undeclared keys
    additional_any: bool = False  # `additionalProperties: true` somewhere
    items: list[_Node] = field(default_factory=list)
    read_only: bool = False


def _is_placeholder(value: Any) -> bool:
    return isinstance(value, str) and value in _PLACEHOLDERS


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_integer(value: Any) -> bool:
    # Pulumi's wire format carries every number as a float; the provider sends 3.0 as 3.
    if isinstance(value, float):
        return math.isfinite(value) and value.is_integer()
    return isinstance(value, int) and not isinstance(value, bool)


_TYPE_CHECKS = {
    "string": lambda v: isinstance(v, str),
    "integer": _is_integer,
    "number": _is_number,
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
}


def _same(a: Any, b: Any) -> bool:
    """Equality for enum/uniqueness checks: no bool/int mixing, but 3.0 == 3."""
    if _is_number(a) and _is_number(b):
        return a == b
    return type(a) is type(b) and a == b


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


@functools.lru_cache(maxsize=None)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class AksOpenApi:
    """Validator for the two AKS PUT request bodies, built lazily from the Swagger spec."""

    def __init__(self, spec_file: Path) -> None:
        self._spec_file = spec_file.resolve()
        self._docs: dict[Path, dict] = {}  # parsed JSON files, loaded on first $ref into them
        self._views: dict[tuple[Path, int], _View] = {}  # merged schemas, by (file, id(schema))

    @functools.cached_property
    def _mc_operation(self) -> tuple[_Node, dict[str, _Node]]:
        return self._operation(self._doc(self._spec_file), _MC_OPERATION)

    @functools.cached_property
    def _ap_operation(self) -> tuple[_Node, dict[str, _Node]]:
        return self._operation(self._doc(self._spec_file), _AP_OPERATION)

    @classmethod
    def load(cls, shared_dir: Path) -> "AksOpenApi":
        """Load from `shared_dir` (the folder that contains `specs/`)."""
        spec_file = Path(shared_dir) / _SPEC_RELPATH
        if not spec_file.is_file():
            raise FileNotFoundError(f"AKS OpenAPI spec not found: {spec_file}")
        return cls(spec_file)

    # ---- public API -------------------------------------------------------------------------

    def validate_managed_cluster(self, inputs: dict) -> list[str]:
        """Problems with the ManagedCluster PUT these Pulumi inputs become ([] = valid)."""
        return self._validate_put(inputs, *self._mc_operation, _MC_TOP_LEVEL)

    def validate_agent_pool(self, inputs: dict) -> list[str]:
        """Problems with the AgentPool PUT these Pulumi inputs become ([] = valid)."""
        return self._validate_put(inputs, *self._ap_operation, frozenset())

    def validate_put(self, operation_id: str, inputs: dict, top_level: frozenset[str]) -> list[str]:
        """Problems with the PUT body of any operation of this spec: `top_level` inputs stay at the
        top of the body (location, tags...), the others go under `properties` (specs/README.md)."""
        body_schema, params = self._operation(self._doc(self._spec_file), operation_id)
        return self._validate_put(inputs, body_schema, params, top_level)

    def validate_request(self, operation_id: str, path_parameters: dict, body: Any) -> list[str]:
        """Problems with one request of any operation of this spec that has a body (a POST action's
        too): its path parameters (subscriptionId aside) and its body as sent, not Pulumi inputs."""
        body_schema, params = self._operation(self._doc(self._spec_file), operation_id)
        return self._validate(path_parameters, params, body, body_schema)

    def _validate_put(self, inputs: dict, body_schema: _Node, params: dict[str, _Node],
                      top_level: frozenset[str]) -> list[str]:
        body: dict[str, Any] = {}
        props: dict[str, Any] = {}
        for key, value in inputs.items():
            if key in params:
                continue
            (body if key in top_level else props)[key] = value
        if props:
            body["properties"] = props
        return self._validate(inputs, params, body, body_schema)

    # ---- spec loading -----------------------------------------------------------------------

    def _doc(self, file: Path) -> dict:
        if file not in self._docs:
            self._docs[file] = json.loads(file.read_text(encoding="utf-8"))
        return self._docs[file]

    def _resolve(self, file: Path, ref: str) -> _Node:
        """Resolve a `$ref` relative to the file that contains it."""
        target, _, pointer = ref.partition("#")
        target_file = (file.parent / target).resolve() if target else file
        node: Any = self._doc(target_file)
        for token in filter(None, pointer.split("/")):
            node = node[unquote(token).replace("~1", "/").replace("~0", "~")]
        return target_file, node

    def _deref(self, file: Path, obj: dict) -> _Node:
        while "$ref" in obj:
            file, obj = self._resolve(file, obj["$ref"])
        return file, obj

    def _operation(self, spec: dict, operation_id: str) -> tuple[_Node, dict[str, _Node]]:
        """(body schema, {path parameter name: parameter schema}) of one operation."""
        for path_item in spec["paths"].values():
            for op in path_item.values():
                if not isinstance(op, dict) or op.get("operationId") != operation_id:
                    continue
                body: _Node | None = None
                params: dict[str, _Node] = {}
                for raw in [*path_item.get("parameters", []), *op.get("parameters", [])]:
                    file, param = self._deref(self._spec_file, raw)
                    if param["in"] == "body":
                        body = (file, param["schema"])
                    elif param["in"] == "path" and param["name"] not in _IMPLICIT_PATH_PARAMS:
                        schema = {k: v for k, v in param.items() if k not in _PARAM_META}
                        params[param["name"]] = (file, schema)
                if body is None:
                    raise ValueError(f"{operation_id} has no body parameter")
                return body, params
        raise ValueError(f"operation {operation_id} not found in {self._spec_file}")

    def _view(self, node: _Node) -> _View:
        """Merge a schema with its `$ref` target and `allOf` parts (cached)."""
        key = (node[0], id(node[1]))
        if key not in self._views:
            view = _View()
            for file, part in self._parts(node, set()):
                view.parts.append(part)
                view.read_only |= part.get("readOnly") is True
                for name, sub in part.get("properties", {}).items():
                    view.properties.setdefault(name, []).append((file, sub))
                for name in part.get("required", []):
                    if name not in view.required:
                        view.required.append(name)
                extra = part.get("additionalProperties")
                if extra is True:
                    view.additional_any = True
                elif isinstance(extra, dict):
                    view.additional.append((file, extra))
                if isinstance(part.get("items"), dict):
                    view.items.append((file, part["items"]))
            self._views[key] = view
        return self._views[key]

    def _parts(self, node: _Node, seen: set[tuple[Path, int]]) -> Iterable[_Node]:
        # A `$ref` node counts as allOf [target, its own sibling keywords] (AutoRest semantics).
        file, schema = node
        if (file, id(schema)) in seen:
            return
        seen.add((file, id(schema)))
        yield node
        if "$ref" in schema:
            yield from self._parts(self._resolve(file, schema["$ref"]), seen)
        for sub in schema.get("allOf", []):
            yield from self._parts((file, sub), seen)

    # ---- validation -------------------------------------------------------------------------

    def _validate(
        self, inputs: dict, params: dict[str, _Node], body: dict, body_schema: _Node
    ) -> list[str]:
        problems: list[str] = []
        for name, schema in params.items():  # every path parameter is `required: true`
            if name not in inputs:
                problems.append(f"{name}: required path parameter is missing")
            else:
                self._check(inputs[name], schema, name, problems)
        self._check(body, body_schema, "", problems)
        return problems

    def _check(self, value: Any, node: _Node, path: str, out: list[str]) -> None:
        if _is_placeholder(value):
            return
        view = self._view(node)
        where = path or "<body>"
        for type_name in {p["type"] for p in view.parts if isinstance(p.get("type"), str)}:
            check = _TYPE_CHECKS.get(type_name)
            if check is not None and not check(value):
                out.append(f"{where}: {_show(value)} is not of type {type_name!r}")
                return  # further keywords would only repeat the same mistake
        for part in view.parts:
            self._check_keywords(value, part, where, out)
        if isinstance(value, dict):
            self._check_object(value, view, path, out)
        elif isinstance(value, list):
            for index, item in enumerate(value):
                for item_node in view.items:
                    self._check(item, item_node, f"{path}[{index}]", out)

    @staticmethod
    def _check_keywords(value: Any, part: dict, where: str, out: list[str]) -> None:
        """Scalar / size keywords of one schema part."""
        shown = _show(value)
        if "enum" in part and not any(_same(value, e) for e in part["enum"]):
            # x-ms-enum `modelAsString: true` only means "extensible" to SDKs; the listed
            # values are still the only ones this API version knows.
            extensible = part.get("x-ms-enum", {}).get("modelAsString") is True
            note = EXTENSIBLE_ENUM_NOTE if extensible else "(enum)"
            out.append(f"{where}: {shown} is not one of {part['enum']} {note}")
        if isinstance(value, str):
            if "pattern" in part and not _compiled(part["pattern"]).search(value):
                out.append(f"{where}: {shown} does not match pattern {part['pattern']!r}")
            if "minLength" in part and len(value) < part["minLength"]:
                out.append(f"{where}: {shown} is shorter than minLength {part['minLength']}")
            if "maxLength" in part and len(value) > part["maxLength"]:
                out.append(f"{where}: {shown} is longer than maxLength {part['maxLength']}")
        if _is_number(value):
            # Swagger 2.0 / draft-4: exclusiveMinimum/-Maximum are booleans modifying the bound.
            if "minimum" in part:
                low, excl = part["minimum"], part.get("exclusiveMinimum") is True
                if value < low or (excl and value == low):
                    rule = "exclusiveMinimum" if excl else "minimum"
                    out.append(f"{where}: {shown} is below {rule} {low}")
            if "maximum" in part:
                high, excl = part["maximum"], part.get("exclusiveMaximum") is True
                if value > high or (excl and value == high):
                    rule = "exclusiveMaximum" if excl else "maximum"
                    out.append(f"{where}: {shown} is above {rule} {high}")
        if isinstance(value, list):
            if "minItems" in part and len(value) < part["minItems"]:
                out.append(f"{where}: {len(value)} items, fewer than minItems {part['minItems']}")
            if "maxItems" in part and len(value) > part["maxItems"]:
                out.append(f"{where}: {len(value)} items, more than maxItems {part['maxItems']}")
            if part.get("uniqueItems") is True:
                if len({_canonical(v) for v in value}) != len(value):
                    out.append(f"{where}: {shown} has duplicate items (uniqueItems)")

    def _flattened(self, value: dict, view: _View) -> dict:
        """`value` with the keys Pulumi flattens moved back under `properties`: where a schema's
        `properties` is marked x-ms-client-flatten (list items such as NSG rules, subnet
        delegations, private link connections), Pulumi's inputs carry its fields one level up."""
        nodes = [node for node in view.properties.get("properties", []) if node[1].get("x-ms-client-flatten") is True]
        if not nodes:
            return value
        inner = self._view(nodes[0])
        moved = {key: sub for key, sub in value.items() if key not in view.properties and key in inner.properties}
        if not moved:
            return value
        kept = {key: sub for key, sub in value.items() if key not in moved}
        kept["properties"] = {**(kept.get("properties") or {}), **moved}
        return kept

    def _check_object(self, value: dict, view: _View, path: str, out: list[str]) -> None:
        value = self._flattened(value, view)
        for name in view.required:
            # A required+readOnly property can never be sent, so it cannot be demanded.
            read_only = any(self._view(n).read_only for n in view.properties.get(name, []))
            if name not in value and not read_only:
                out.append(f"{_child(path, name)}: required property is missing")
        for key, sub in value.items():
            if key in view.properties:
                nodes = view.properties[key]
                if any(self._view(n).read_only for n in nodes):
                    out.append(f"{_child(path, key)}: {_show(sub)} sent, but it is readOnly")
                    continue
                for sub_node in nodes:
                    self._check(sub, sub_node, _child(path, key), out)
            elif view.additional or view.additional_any:
                # Maps (tags, addonProfiles, userAssignedIdentities): keys are free, values
                # follow the additionalProperties schema.  Keys may contain dots, hence [...].
                for sub_node in view.additional:
                    self._check(sub, sub_node, f"{path}[{json.dumps(key)}]", out)
            else:
                # Every object is closed unless additionalProperties says otherwise.
                out.append(
                    f"{_child(path, key)}: unknown property {key!r} (value {_show(sub)}); "
                    f"allowed: {sorted(view.properties)}"
                )
