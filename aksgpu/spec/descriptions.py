"""Field descriptions: the string under each field of a spec model, read from the source.

pydantic can read them itself (use_attribute_docstrings), but it does so while building every
model at import, finding each class's source by walking stack frames and tokenizing the file
again per class: about 50 ms of every command's start, for text that only the JSON Schema,
`aksgpu presets show`, `diff` and the stack-file comments print. Here each module's source is
parsed once, when a description is first asked for, with pydantic's rule: a string literal right
after an annotated assignment in the class body describes that field.
"""

from __future__ import annotations

import ast
import functools
import inspect
import sys
from typing import Any

from pydantic import BaseModel


@functools.cache
def _module_classes(module_name: str) -> dict[str, ast.ClassDef]:
    """Every class of a module by qualified name, from one parse of its source."""
    module = sys.modules.get(module_name)
    try:
        source = inspect.getsource(module) if module is not None else ""
    except (OSError, TypeError):  # no source (a frozen or compiled-only install): no descriptions
        return {}
    classes: dict[str, ast.ClassDef] = {}

    def collect(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                classes[prefix + node.name] = node
                collect(node.body, f"{prefix}{node.name}.")

    collect(ast.parse(source).body, "")
    return classes


def _own_docstrings(cls: type) -> dict[str, str]:
    """{attribute: docstring} of the fields `cls` itself declares."""
    node = _module_classes(cls.__module__).get(cls.__qualname__)
    docs: dict[str, str] = {}
    if node is None:
        return docs
    for statement, following in zip(node.body, node.body[1:], strict=False):
        if (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)
                and isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)):
            docs[statement.target.id] = inspect.cleandoc(following.value.value)
    return docs


@functools.cache
def field_descriptions(model: type[BaseModel]) -> dict[str, str]:
    """{field name: description} of every field of `model`, inherited ones included: an explicit
    Field(description=...) first, else the docstring under the field where it is declared."""
    docs: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if isinstance(cls, type) and issubclass(cls, BaseModel) and cls is not BaseModel:
            docs.update(_own_docstrings(cls))
    return {name: info.description or docs.get(name, "") for name, info in model.model_fields.items()
            if info.description or name in docs}


def describe_schema_properties(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """A `json_schema_extra` hook: each property of `model`'s JSON Schema gets its field's
    description, where pydantic would have put it with use_attribute_docstrings."""
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return
    descriptions = field_descriptions(model)
    for name, info in model.model_fields.items():
        key = info.alias if info.alias in properties else name  # by_alias=True or False
        if key in properties and name in descriptions and "description" not in properties[key]:
            properties[key]["description"] = descriptions[name]
