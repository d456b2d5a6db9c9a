"""Every field of the cluster spec has a description: `aksgpu presets show` prints it and the
JSON Schema carries it to editors. Descriptions are the docstrings under the fields."""

from __future__ import annotations

from typing import Any, get_args

from pydantic import BaseModel

from aksgpu.spec import ClusterSpec
from aksgpu.spec.descriptions import field_descriptions


def models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models inside an annotation, through list[...], dict[...], X | None, Annotated."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in get_args(annotation) for model in models_in(arg)]


def reachable_models(root: type[BaseModel]) -> list[type[BaseModel]]:
    """`root` and every model reachable through its fields, each once, in discovery order."""
    found = [root]
    for model in found:  # `found` grows while it is walked
        for field in model.model_fields.values():
            found += [m for m in models_in(field.annotation) if m not in found]
    return found


def test_the_walk_reaches_nested_models() -> None:
    names = {model.__name__ for model in reachable_models(ClusterSpec)}
    # One model per nesting shape: X | None, list[X], X inside list[X], plain X.
    assert {"GpuSettings", "NodePool", "Subnet", "MaintenanceWindow", "UpgradeSettings", "LogAnalytics"} <= names


def test_every_spec_field_has_a_description() -> None:
    missing = [
        f"{model.__name__}.{name}"
        for model in reachable_models(ClusterSpec)
        for name in model.model_fields
        if not field_descriptions(model).get(name, "").strip()
    ]
    assert not missing, "fields without a description (add a docstring under each): " + ", ".join(missing)


def test_json_schema_describes_node_pool_vm_size() -> None:
    schema = ClusterSpec.model_json_schema(by_alias=True)
    ref = schema["properties"]["nodePools"]["items"]["$ref"]
    node_pool = schema["$defs"][ref.removeprefix("#/$defs/")]
    assert node_pool["properties"]["vmSize"]["description"].strip()


def test_descriptions_are_what_pydantic_itself_reads_from_the_source() -> None:
    """descriptions.py reads the docstrings under the fields once per module instead of once per
    class at import; for every model it must find exactly what pydantic's own reader finds."""
    from pydantic._internal._docs_extraction import extract_docstrings_from_cls

    from aksgpu.environments.file import EnvironmentsDocument

    for model in reachable_models(ClusterSpec) + reachable_models(EnvironmentsDocument):
        expected: dict[str, str] = {}
        for cls in reversed(model.__mro__):
            if isinstance(cls, type) and issubclass(cls, BaseModel) and cls is not BaseModel:
                expected.update(extract_docstrings_from_cls(cls, use_inspect=True))
        expected = {name: doc for name, doc in expected.items() if name in model.model_fields}
        assert field_descriptions(model) == expected, model.__name__


def test_importing_the_spec_reads_no_source() -> None:
    """The descriptions cost nothing until something prints them."""
    import subprocess
    import sys

    code = ("import aksgpu.spec, aksgpu.spec.descriptions as d; "
            "print(d._module_classes.cache_info().currsize)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "0"
