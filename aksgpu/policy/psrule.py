"""The status in aksgpu of each PSRule for Azure rule for the resource types aksgpu declares
(psrule.yaml): enforced by a rule of the policy pack, declared by default, checked by `aksgpu
validate`, waived or not applicable, each with what backs it. Data only; tests/test_psrule.py holds
it to the extract of PSRule's rules (tests/data/psrule/rules.yaml) and to the code it names."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

import yaml

TABLE_FILE = Path(__file__).resolve().with_name("psrule.yaml")
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

Status = Literal["enforced", "default", "validated", "waived", "not-applicable"]
STATUSES: tuple[str, ...] = get_args(Status)
# What each status must name (psrule.yaml's header): one of each tuple at least.
_NEEDS: dict[str, tuple[str, ...]] = {"enforced": ("policy",), "default": ("field", "component"),
                                      "validated": ("check",), "waived": ("reason",), "not-applicable": ("reason",)}
_KEYS = {"rule", "status", "policy", "field", "component", "sets", "check", "reason", "note"}


@dataclass(frozen=True)
class RuleStatus:
    rule: str  # the PSRule rule's name, e.g. Azure.AKS.UseRBAC
    status: Status
    policy: str | None = None  # enforced: the id of aksgpu's policy rule (rules.yaml)
    field: str | None = None  # the spec field that governs it (ClusterSpec path)
    component: str | None = None  # default: the module (repository path) that sets it
    sets: str | None = None  # default: the text in `component` that sets it
    check: str | None = None  # validated: module:function (or module:Model for a field's type)
    reason: str | None = None  # waived, not-applicable: why
    note: str | None = None  # anything a reviewer should know on top

    @property
    def detail(self) -> str:
        """One line for the docs: what backs the status."""
        parts = {
            "enforced": f"policy rule `{self.policy}`",
            "default": " ".join(filter(None, [f"`{self.field}`" if self.field else None,
                                              f"({self.component})" if self.component else None])),
            "validated": " ".join(filter(None, [f"`{self.field}`" if self.field else None, f"({self.check})"])),
            "waived": self.reason or "",
            "not-applicable": self.reason or "",
        }[self.status]
        return f"{parts}. {self.note}" if self.note else parts


def _entry(raw: dict[str, object]) -> RuleStatus:
    unknown = set(raw) - _KEYS
    if unknown:
        raise ValueError(f"psrule.yaml: {raw.get('rule')}: unknown keys {sorted(unknown)}")
    status = raw.get("status")
    if status not in STATUSES:
        raise ValueError(f"psrule.yaml: {raw.get('rule')}: status {status!r} is not one of {', '.join(STATUSES)}")
    if not any(raw.get(key) for key in _NEEDS[str(status)]):
        raise ValueError(f"psrule.yaml: {raw.get('rule')}: status {status} needs {' or '.join(_NEEDS[str(status)])}")
    if raw.get("sets") and not raw.get("component"):
        raise ValueError(f"psrule.yaml: {raw.get('rule')}: sets needs the component it is in")
    return RuleStatus(**{key: str(value) for key, value in raw.items()})  # type: ignore[arg-type]


@functools.cache
def statuses() -> tuple[RuleStatus, ...]:
    """Every entry of psrule.yaml, in its order."""
    with TABLE_FILE.open(encoding="utf-8") as handle:
        document = yaml.load(handle, Loader=_LOADER)  # noqa: S506 - a safe loader, C or Python
    return tuple(_entry(raw) for raw in document["rules"])
