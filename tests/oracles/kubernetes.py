"""Oracle: Kubernetes objects and Helm values checked against references no one here wrote.

- Built-in kinds: `kubernetes-validate` (PyPI) in strict mode (unknown fields are errors), for the
  Kubernetes version the spec targets.
- Custom resources (Kueue, Azure Monitor's PodMonitor): the openAPIV3Schema of the CRD copied
  unchanged from the upstream project into tests/data (see each folder's SOURCE.md), with the
  API server's strict field validation applied: a property an object schema does not list is an
  error unless the schema preserves unknown fields. CEL rules (x-kubernetes-validations) are not
  evaluated.
- Helm values: a chart's own values.schema.json where it has one; otherwise every key path set
  must be one the chart's values.yaml declares or its templates read (`.Values.<path>`).
"""

from __future__ import annotations

import copy
import functools
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

DATA = Path(__file__).resolve().parents[1] / "data"
# apiVersion/kind -> the CRD file that defines it (tests/data).
CRD_FILES = {
    ("kueue.x-k8s.io", "ResourceFlavor"): DATA / "kueue" / "kueue.x-k8s.io_resourceflavors.yaml",
    ("kueue.x-k8s.io", "ClusterQueue"): DATA / "kueue" / "kueue.x-k8s.io_clusterqueues.yaml",
    ("kueue.x-k8s.io", "LocalQueue"): DATA / "kueue" / "kueue.x-k8s.io_localqueues.yaml",
    ("kueue.x-k8s.io", "Topology"): DATA / "kueue" / "kueue.x-k8s.io_topologies.yaml",
    ("azmonitoring.coreos.com", "PodMonitor"): DATA / "azmonitoring" / "podmonitors.azmonitoring.coreos.com.yaml",
    ("resource.nvidia.com", "ComputeDomain"):
        DATA / "dra-driver-nvidia-gpu" / "crds" / "resource.nvidia.com_computedomains.yaml",
    ("mellanox.com", "NicClusterPolicy"): DATA / "network-operator" / "mellanox.com_nicclusterpolicies.yaml",
    ("nvidia.com", "NVIDIADriver"): DATA / "gpu-operator" / "crds" / "nvidia.com_nvidiadrivers.yaml",
}


def _strict(schema: Any) -> Any:
    """The schema with additionalProperties: false on every object that lists its properties."""
    if isinstance(schema, dict):
        node = {key: _strict(value) for key, value in schema.items()}
        if ("properties" in node and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")):
            node["additionalProperties"] = False
        return node
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    return schema


@functools.cache
def _crd_schema(group: str, version: str, kind: str) -> dict[str, Any]:
    document = yaml.safe_load(CRD_FILES[(group, kind)].read_text(encoding="utf-8"))
    for entry in document["spec"]["versions"]:
        if entry["name"] == version:
            if not entry.get("served", False):
                raise ValueError(f"{group}/{version} {kind} is not served by the CRD")
            schema = copy.deepcopy(entry["schema"]["openAPIV3Schema"])
            # metadata is the API server's ObjectMeta, checked by its own rules; the CRD says object.
            schema["properties"]["metadata"] = {"type": "object"}
            return _strict(schema)
    raise ValueError(f"the CRD of {kind} serves no version {version}")


def validate_object(obj: dict[str, Any], kubernetes_version: str) -> list[str]:
    """Problems of one object (empty: valid), strictly, for Kubernetes `kubernetes_version` (major.minor)."""
    api_version = str(obj.get("apiVersion", ""))
    group, _, version = api_version.rpartition("/")
    kind = str(obj.get("kind", ""))
    if (group, kind) in CRD_FILES:
        validator = jsonschema.Draft7Validator(_crd_schema(group, version, kind))
        return [f"{'/'.join(str(p) for p in error.absolute_path) or '(top)'}: {error.message}"
                for error in sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path))]
    try:
        kubernetes_validate.validate(obj, f"{kubernetes_version}.0", strict=True)
    except kubernetes_validate.ValidationError as error:
        return [f"{'/'.join(str(p) for p in error.path) or '(top)'}: {error.message}"]
    except kubernetes_validate.SchemaNotFoundError as error:
        return [error.message]
    return []


# --- Helm values -----------------------------------------------------------------------------


def leaf_paths(values: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Key paths of every leaf (lists are leaves: Helm replaces them whole)."""
    if isinstance(values, dict) and values:
        return [path for key, value in values.items() for path in leaf_paths(value, (*prefix, str(key)))]
    return [prefix]


def _declares(values: Any, path: tuple[str, ...]) -> bool:
    """Whether values.yaml declares `path`; an empty mapping there (affinity: {}) is free-form."""
    node = values
    for part in path:
        if node == {}:
            return True
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


_VALUES_REFERENCE = re.compile(r"\.Values((?:\.[A-Za-z0-9_]+|\[\s*\"[^\"]+\"\s*\])+)")


def template_value_paths(template_texts: list[str]) -> set[tuple[str, ...]]:
    """Every `.Values.a.b.c` (and `.Values["a-b"]`) path the chart's templates read."""
    paths: set[tuple[str, ...]] = set()
    for text in template_texts:
        for match in _VALUES_REFERENCE.finditer(text):
            parts = re.findall(r"\.([A-Za-z0-9_]+)|\[\s*\"([^\"]+)\"\s*\]", match.group(1))
            paths.add(tuple(a or b for a, b in parts))
    return paths


def unknown_value_paths(values: dict[str, Any], chart_values: dict[str, Any], template_paths: set[tuple[str, ...]],
                        skip: tuple[str, ...] = ()) -> list[str]:
    """Leaf paths of `values` the chart neither declares in values.yaml nor reads in a template.
    A template that reads a path's ancestor as a whole (toYaml) counts as reading it."""
    problems = []
    for path in leaf_paths(values):
        if path and path[0] in skip:
            continue
        if _declares(chart_values, path):
            continue
        if any(path[:length] in template_paths for length in range(1, len(path) + 1)):
            continue
        problems.append(".".join(path))
    return problems


def go_json_fields(go_source: str) -> set[str]:
    """The JSON field names (`json:"name,omitempty"`) a Go file's types declare."""
    return set(re.findall(r'json:"([A-Za-z0-9_]+)[,"]', go_source))


def mapping_keys(value: Any) -> set[str]:
    """Every key of every mapping nested in `value`."""
    if isinstance(value, dict):
        return set(map(str, value)) | {key for item in value.values() for key in mapping_keys(item)}
    if isinstance(value, list):
        return {key for item in value for key in mapping_keys(item)}
    return set()
