"""Oracle: a ValidatingAdmissionPolicy evaluated with an independent CEL implementation.

cel-python (PyPI) evaluates the policy's matchConditions, variables and validations the way the
API server does for admissionregistration.k8s.io/v1: `object`, `oldObject`, `request` and
`namespaceObject` are bound, `variables.<name>` holds each variable (in order), a request that
fails a match condition is not checked, and every validation that is false is a denial.
Kubernetes' CEL extensions beyond the standard macros and string functions are not modelled; the
policies here use none.
"""

from __future__ import annotations

import functools
from typing import Any

import celpy


@functools.cache
def _program(expression: str) -> Any:
    """An expression's compiled program, made once per process (parsing is most of an evaluation's
    time; a program keeps no state between evaluations, each gets its own activation)."""
    environment = celpy.Environment()
    return environment.program(environment.compile(expression))


def _evaluate(expression: str, activation: dict[str, Any]) -> Any:
    return _program(expression).evaluate(activation)


def denials(policy: dict[str, Any], *, obj: dict[str, Any], old: dict[str, Any] | None = None,
            request: dict[str, Any] | None = None, namespace: dict[str, Any] | None = None) -> list[str]:
    """The messages of the validations that deny this request ([]: allowed or not matched)."""
    spec = policy["spec"]
    activation: dict[str, Any] = {
        "object": celpy.json_to_cel(obj),
        "oldObject": celpy.json_to_cel(old or {}),
        "request": celpy.json_to_cel(request or {"userInfo": {"username": "someone"}}),
        "namespaceObject": celpy.json_to_cel(namespace or {"metadata": {}}),
    }
    for condition in spec.get("matchConditions") or []:
        if not bool(_evaluate(condition["expression"], activation)):
            return []
    variables: dict[str, Any] = {}
    for variable in spec.get("variables") or []:
        activation["variables"] = celpy.json_to_cel({})  # placeholder while earlier values are computed
        activation["variables"] = celpy.celtypes.MapType(variables)
        variables[celpy.celtypes.StringType(variable["name"])] = _evaluate(variable["expression"], activation)
    activation["variables"] = celpy.celtypes.MapType(variables)
    found = []
    for validation in spec["validations"]:
        if not bool(_evaluate(validation["expression"], activation)):
            found.append(validation.get("message") or str(_evaluate(validation["messageExpression"], activation)))
    return found
