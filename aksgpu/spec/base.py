"""Building blocks of the cluster spec: strict models, issues, and readable errors.

Every problem a spec can have is reported as an `Issue` (aksgpu.errors.Problem, the domain's one
problem type) that names the field path, the value, the rule and the fix. Shape and type problems
come from pydantic and are translated here; cross-field rules live beside the fields they govern
(see the `check_*` functions of each concern module) and yield `Issue`s directly.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
import types
import typing
from decimal import Decimal
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from aksgpu import catalog
from aksgpu.spec.descriptions import describe_schema_properties
from aksgpu.errors import MISSING as _MISSING
from aksgpu.errors import EXIT_FAILED, Problem, UserError, render_problems
# The spec's names for these, kept (explicit re-exports).
from aksgpu.errors import Severity as Severity
from aksgpu.errors import is_missing as is_missing
from aksgpu.errors import one_line as one_line
from aksgpu.errors import render_value as render_value
from aksgpu.stack_config import CLUSTER_KEY

class SpecModel(BaseModel):
    """A strict spec model: camelCase keys, unknown keys are errors, values are immutable."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        frozen=True,
        validate_default=True,
        # No silent conversions: "yes" is not true, 2.0 is not 2, "8" is not 8.
        strict=True,
        # The string under each field is its description (JSON Schema, `aksgpu presets show`),
        # read from the source only when asked for: see descriptions.py.
        json_schema_extra=describe_schema_properties,
        # Each model's validator is built when it first validates, not when its class is made: a
        # command builds the ones it uses (ClusterSpec's holds its parts; a cluster's command never
        # builds the fleet's models), pydantic's defer_build.
        defer_build=True,
    )


# One problem in a spec: where, what, which rule, and how to fix it (the domain's one problem type).
Issue = Problem


class SpecError(UserError):
    """The spec has errors: a UserError whose problems are the spec's (`issues`, warnings too).
    A command exits 1 on it (the spec is wrong, not the command line) and prints the problems
    without an "error:" prefix, one line each."""

    exit_code = EXIT_FAILED

    def __init__(self, issues: list[Issue], source: str = CLUSTER_KEY) -> None:
        super().__init__(render_problems(source, issues), issues, source)

    @property
    def issues(self) -> list[Issue]:
        return self.problems

    @property
    def errors(self) -> list[Issue]:
        return [issue for issue in self.issues if issue.severity == "error"]

    def render(self) -> str:
        return render_problems(self.source or CLUSTER_KEY, self.issues)

    def text(self) -> str:
        return self.render()


# The tags aksgpu adds itself to every Azure resource it creates (cluster and fleet: components/
# aks_gpu_cluster.py, components/fleet.py); a tag of the same name in the spec overrides the value.
AKSGPU_TAGS: dict[str, str] = {"managed-by": "aksgpu"}


def check_tags(tags: dict[str, str], policy_owned: typing.Sequence[str] = ()) -> typing.Iterator[Issue]:
    """Azure's rules for tag names and values, and its limit of tags per resource counting the tags
    aksgpu adds and those Azure Policy adds (catalog azure_tags.yaml, with the source)."""
    rules = catalog.load("azure_tags")
    forbidden = rules["forbiddenNameCharacters"]
    names, values = rules["maxNameLength"], rules["maxValueLength"]
    seen: dict[str, str] = {key.lower(): key for key in AKSGPU_TAGS}
    for key, value in tags.items():
        if not key or len(key) > names or len(value) > values or any(c in key for c in forbidden):
            yield Issue(f"tags.{key}", value, f"tag names are 1-{names} characters without {forbidden}, values at "
                        f"most {values} (Azure, tag-resources: Limitations)", "shorten or rename the tag")
        other = seen.get(key.lower())
        if other is not None and other != key:
            owner = "aksgpu's own tag" if other in AKSGPU_TAGS else "tag"
            yield Issue(f"tags.{key}", value, f"Azure tag names are case-insensitive (tag-resources), so this is "
                        f"{owner} {other} again: one value would be lost", f"use one spelling, {other}")
        seen.setdefault(key.lower(), key)
    yield from check_tag_count(tags, policy_owned, rules["maxTagsPerResource"], "every resource aksgpu creates")


def check_tag_count(tags: dict[str, str], policy_owned: typing.Sequence[str], limit: int, where: str,
                    other_fix: str = "") -> typing.Iterator[Issue]:
    """At most `limit` tags on the resources `where` names: the spec's, aksgpu's own and the
    policy-owned ones, each name once (Azure tag names are case-insensitive)."""
    ours = {key.lower() for key in AKSGPU_TAGS} - {key.lower() for key in tags}
    owned = {name.lower() for name in policy_owned} - {key.lower() for key in tags} - ours
    total = len({key.lower() for key in tags}) + len(ours) + len(owned)
    if total <= limit:
        return
    added = f", the {len(ours)} aksgpu adds ({', '.join(sorted(ours))})" if ours else ""
    policy = f" and the {len(owned)} Azure Policy adds (policyOwnedTags)" if owned else ""
    yield Issue("tags", total, f"Azure allows at most {limit} tags on {where} (tag-resources: "
                f"Limitations), and each gets the {len({key.lower() for key in tags})} tags listed here{added}"
                f"{policy}", f"remove {total - limit} tag(s), or merge several into one tag whose value is JSON{other_fix}")


def check_policy_owned_tags(tags: dict[str, str], owned: list[str]) -> typing.Iterator[Issue]:
    """Tag names Azure Policy owns: valid names, each once, none also set by aksgpu (Azure tag names
    are case-insensitive: learn.microsoft.com/azure/azure-resource-manager/management/tag-resources,
    Limitations, read 2026-11-27)."""
    ours = {key.lower(): key for key in (*AKSGPU_TAGS, *tags)}
    seen: set[str] = set()
    for index, name in enumerate(owned):
        path = f"policyOwnedTags[{index}]"
        if not name or len(name) > 512 or any(c in name for c in "<>%&\\?/"):
            yield Issue(path, name, "tag names are 1-512 characters without <>%&\\?/", "correct the tag name")
        elif name.lower() in ours:
            yield Issue(path, name, f"tag {ours[name.lower()]} is set by aksgpu (tags, or its managed-by tag), and "
                        "a policy-owned tag is left to Azure Policy: both would write it",
                        f"remove {name} from tags, or from policyOwnedTags")
        elif name.lower() in seen:
            yield Issue(path, name, "tag names are case-insensitive and this one is listed twice", "list it once")
        seen.add(name.lower())


def did_you_mean(name: str, known: typing.Iterable[str], cutoff: float = 0.6) -> str:
    """'did you mean "X"? ' for the closest of `known` to a misspelt `name`, or "" when none is close."""
    guess = difflib.get_close_matches(str(name), list(known), n=1, cutoff=cutoff)
    return f'did you mean "{guess[0]}"? ' if guess else ""


def fields_by_alias(model: type[BaseModel]) -> dict[str, typing.Any]:
    """A model's fields by the name a user writes (camelCase)."""
    return {(info.alias or name): info for name, info in model.model_fields.items()}


def rule_error(rule: str, fix: str) -> PydanticCustomError:
    """An error for a field-level rule; `issues_from_validation_error` keeps rule and fix."""
    return PydanticCustomError("aksgpu_rule", "{rule}", {"rule": rule, "fix": fix})


def checked(check: typing.Callable[[Any], bool], rule: str, fix: str) -> AfterValidator:
    """A field validator that enforces `check` with an aksgpu rule and fix."""

    def validate(value: Any) -> Any:
        if value is not None and not check(value):
            raise rule_error(rule, fix)
        return value

    return AfterValidator(validate)


def _is_ipv4_network(value: str) -> bool:
    try:
        ipaddress.IPv4Network(value, strict=True)
    except ValueError:
        return False
    return True


def _is_ipv4_address(value: str) -> bool:
    try:
        ipaddress.IPv4Address(value)
    except ValueError:
        return False
    return True


Cidr = Annotated[
    str,
    checked(
        _is_ipv4_network,
        "must be an IPv4 network in CIDR form with no host bits set",
        'write it like "10.224.0.0/16"',
    ),
]
Ipv4 = Annotated[str, checked(_is_ipv4_address, "must be an IPv4 address", 'write it like "10.0.0.10"')]


def _is_guid(value: str) -> bool:
    import uuid

    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return len(value) == 36


Guid = Annotated[
    str,
    checked(
        _is_guid,
        "must be an Entra ID object ID (a GUID)",
        'copy it from `az ad group show -g NAME --query id`, e.g. "00000000-0000-0000-0000-000000000000"',
    ),
]


_QUANTITY_SUFFIXES = {"m": Decimal("0.001"), "": Decimal(1), "k": Decimal(10) ** 3, "M": Decimal(10) ** 6,
                      "G": Decimal(10) ** 9, "T": Decimal(10) ** 12, "P": Decimal(10) ** 15, "E": Decimal(10) ** 18,
                      "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30, "Ti": Decimal(2) ** 40,
                      "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60}


# A Kubernetes quantity as quotas take it: a number with one of the suffixes above, or none.
QUANTITY = re.compile(r"^(\d+(?:\.\d+)?)(" + "|".join(sorted(_QUANTITY_SUFFIXES, key=len, reverse=True)) + ")$")


def quantity(text: str) -> Decimal:
    """The value of a Kubernetes quantity ("500m" -> 0.5, "8Gi" -> 8589934592) in base units."""
    match = QUANTITY.fullmatch(text)
    if match is None:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    return Decimal(match[1]) * _QUANTITY_SUFFIXES[match[2]]


def network(cidr: str) -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network(cidr, strict=False)


def surge_nodes(max_surge: str | None, nodes: int) -> int:
    """Extra nodes an upgrade adds: an absolute count or a percentage of `nodes` (AKS default 10%)."""
    text = max_surge or "10%"
    if text.endswith("%"):
        return -(-nodes * int(text[:-1]) // 100)
    return int(text)


# --- pydantic errors -> issues -------------------------------------------------------------


def issues_from_validation_error(
    error: ValidationError, data: Any, model: type[BaseModel]
) -> list[Issue]:
    """Translate pydantic's errors into issues with a path, the value, a rule and a fix."""
    issues: list[Issue] = []
    for detail in error.errors(include_url=False):
        loc = _user_loc(detail["loc"])
        path = format_path(loc)
        value = _value_at(data, loc)
        kind = detail["type"]
        ctx = detail.get("ctx") or {}
        if kind == "aksgpu_rule":
            rule, fix = ctx["rule"], ctx["fix"]
        elif kind == "extra_forbidden":
            allowed = _fields_at(model, loc[:-1])
            rule = "is not a field aksgpu knows here"
            fix = did_you_mean(str(loc[-1]), allowed) + "remove it, or use one of: " + ", ".join(allowed)
        elif kind == "missing":
            rule, fix = "is required", "add it"
        elif kind in ("literal_error", "enum"):
            expected = ctx.get("expected", "")
            rule = f"must be one of {expected}"
            fix = "use one of the listed values (they are case-sensitive)"
        elif kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
            rule = _bound_rule(kind, ctx)
            fix = "choose a value inside that range"
        elif kind in ("too_short", "too_long"):
            rule = detail["msg"].replace("List", "the list").replace("Value", "the value")
            fix = "change the number of entries"
        else:
            rule = detail["msg"][0].lower() + detail["msg"][1:]
            fix = _type_fix(kind)
        issues.append(Issue(path, value, rule, fix))
    return issues


def _bound_rule(kind: str, ctx: dict[str, Any]) -> str:
    words = {
        "greater_than_equal": ("at least", "ge"),
        "less_than_equal": ("at most", "le"),
        "greater_than": ("greater than", "gt"),
        "less_than": ("less than", "lt"),
    }
    word, key = words[kind]
    return f"must be {word} {ctx.get(key)}"


def _type_fix(kind: str) -> str:
    if kind.startswith("int"):
        return "write a whole number, without quotes"
    if kind.startswith("bool"):
        return "write true or false"
    if kind == "string_too_long":
        return "shorten it"
    if kind == "string_too_short":
        return "write a longer value"
    if kind.startswith("string") or kind == "str_type":
        return "write a string (quote it in YAML)"
    if kind in ("list_type", "tuple_type"):
        return "write a YAML list"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return "write a YAML mapping of keys to values"
    return "correct the value's type"


def _user_loc(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    # pydantic adds the validator's name for Annotated/union members, e.g. 'function-after[...]'.
    return tuple(part for part in loc if not (isinstance(part, str) and "[" in part))


def format_path(loc: tuple[Any, ...]) -> str:
    """('nodePools', 0, 'name') -> 'nodePools[0].name'."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += ("." if text else "") + str(part)
    return text or "(top level)"


def _value_at(data: Any, loc: tuple[Any, ...]) -> Any:
    current = data
    for part in loc:
        try:
            current = current[part]
        except (KeyError, IndexError, TypeError):
            return _MISSING
    return current


def _fields_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The camelCase field names of the model found at `loc` below `model`."""
    current: Any = model
    for part in loc:
        value_type = _dict_value_type(current)
        if value_type is not None:  # `part` is a key of a dict field: look inside its values
            current = value_type
            continue
        current = _model_in(current)
        if current is None:
            return []
        if isinstance(part, int):
            continue
        field = next(
            (f for name, f in current.model_fields.items() if (f.alias or name) == part), None
        )
        if field is None:
            return []
        current = field.annotation
    current = _model_in(current)
    if current is None:
        return []
    return [field.alias or name for name, field in current.model_fields.items()]


def _dict_value_type(annotation: Any) -> Any:
    """V of an annotation like `dict[K, V]` or `dict[K, V] | None`; None for anything else."""
    if get_origin(annotation) is dict:
        return get_args(annotation)[1]
    if get_origin(annotation) in (Union, types.UnionType):
        for arg in get_args(annotation):
            if get_origin(arg) is dict:
                return get_args(arg)[1]
    return None


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation like `list[Model]`, `Model | None`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = get_origin(annotation)
    if origin in (list, tuple, Union, types.UnionType, Annotated) or origin is not None:
        for arg in get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None
