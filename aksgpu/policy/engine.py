"""Running the rules over declared resources, with an environment's waivers.

The same checks run offline (over the resources `aksgpu plan` records) and for real (the policy
pack in pack.py, over what `pulumi preview` sends the engine). A finding is waived by a waiver
naming its rule and matching its subject (a pool's name, else the resource's name) with one of
its patterns; a waiver past its expiry date waives nothing and fails the evaluation itself.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any, Protocol

# Each check module registers its rules into checks' tables when imported.
from aksgpu.policy import checks, cluster_checks, pool_checks, service_checks, workload_checks  # noqa: F401
from aksgpu.policy.catalog import STACK, Rule, rules
from aksgpu.policy.checks import MISSING, PolicyResource, Violation


class WaiverLike(Protocol):
    """What the engine reads of a waiver (aksgpu.spec.policy.Waiver has it)."""

    @property
    def rule(self) -> str: ...
    @property
    def resources(self) -> list[str]: ...
    @property
    def reason(self) -> str: ...
    @property
    def expires(self) -> str | None: ...


@dataclass(frozen=True)
class Finding:
    rule: Rule
    violation: Violation
    waiver: int | None = None  # index of the waiver that covers it

    @property
    def failing(self) -> bool:
        return self.waiver is None and self.rule.enforcement == "mandatory"

    def line(self) -> str:
        """One line naming the rule, the resource, the property, the value found and the fix."""
        return (f"{self.rule.id} [{self.rule.severity}, {self.rule.enforcement}] "
                f"{short_type(self.violation.resource.type)} {describe(self.rule, self.violation)} "
                f"Fix: {self.rule.fix}")


@dataclass
class PolicyReport:
    findings: list[Finding] = field(default_factory=list)
    expired: list[int] = field(default_factory=list)  # indexes of waivers past their expiry date
    unused: list[int] = field(default_factory=list)  # indexes of waivers that waive nothing
    waivers: Sequence[WaiverLike] = ()

    @property
    def failing(self) -> list[Finding]:
        return [finding for finding in self.findings if finding.failing]

    @property
    def failed(self) -> bool:
        return bool(self.failing or self.expired)

    def problems(self) -> list[str]:
        """What makes the evaluation fail, one line each."""
        lines = [finding.line() for finding in self.failing]
        for index in self.expired:
            waiver = self.waivers[index]
            lines.append(f"policy.waivers[{index}] (rule {waiver.rule}) expired on {waiver.expires}: it no longer "
                         f"waives anything. Fix: fix what it waived, or renew it with a new expires date and a reason.")
        return lines

    def notes(self) -> list[str]:
        """What is reported without failing: advisory findings and waivers that waive nothing."""
        lines = [finding.line() for finding in self.findings if finding.waiver is None and not finding.failing]
        lines += [f"policy.waivers[{index}] (rule {self.waivers[index].rule}) waives no finding. "
                  "Fix: remove it." for index in self.unused]
        return lines

    def counts(self) -> dict[str, int]:
        return {"rules": len(rules()), "findings": len(self.findings),
                "failing": len(self.failing),
                "advisory": sum(1 for f in self.findings if f.waiver is None and not f.failing),
                "waived": sum(1 for f in self.findings if f.waiver is not None),
                "expiredWaivers": len(self.expired), "unusedWaivers": len(self.unused)}

    def document(self) -> dict[str, Any]:
        """The JSON form (the plan document's `policy`)."""
        return {
            **self.counts(),
            "findings": [_finding_json(finding, self.waivers) for finding in self.findings],
            "expiredWaivers": [_waiver_json(index, self.waivers[index]) for index in self.expired],
            "unusedWaivers": [_waiver_json(index, self.waivers[index]) for index in self.unused],
        }


def describe(rule: Rule, violation: Violation) -> str:
    """What was found where, and what the rule wants: the core of every finding's message."""
    return f"{violation.subject}: {violation.path} = {show(violation.value)}: wanted: {rule.title}."


def short_type(type_: str) -> str:
    """azure-native:containerservice:ManagedCluster -> ManagedCluster."""
    return type_.rsplit(":", 1)[-1]


def show(value: Any) -> str:
    if value is MISSING:
        return "(not set)"
    return json.dumps(plain(value), sort_keys=True, default=str)


def plain(value: Any) -> Any:
    """`value` as plain dicts and lists (a policy pack hands over read-only proxies of them)."""
    if isinstance(value, Mapping):
        return {str(key): plain(value[key]) for key in value}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [plain(item) for item in value]
    return value


def _finding_json(finding: Finding, waivers: Sequence[WaiverLike]) -> dict[str, Any]:
    v, rule = finding.violation, finding.rule
    waiver = waivers[finding.waiver] if finding.waiver is not None else None
    return {"rule": rule.id, "title": rule.title, "severity": rule.severity, "enforcement": rule.enforcement,
            "resourceType": v.resource.type, "resource": v.resource.name, "subject": v.subject, "path": v.path,
            "value": None if v.value is MISSING else v.value, "set": v.value is not MISSING,
            "reason": rule.reason, "fix": rule.fix, "sources": list(rule.sources),
            "waived": None if waiver is None else {"waiver": finding.waiver, "reason": waiver.reason,
                                                   "expires": waiver.expires}}


def _waiver_json(index: int, waiver: WaiverLike) -> dict[str, Any]:
    return {"waiver": index, "rule": waiver.rule, "resources": list(waiver.resources), "reason": waiver.reason,
            "expires": waiver.expires}


def violations(rule: Rule, resources: Sequence[PolicyResource]) -> Iterator[Violation]:
    """Every violation of one rule among `resources`."""
    if STACK in rule.applies_to:
        yield from checks.STACK_CHECKS[rule.id](resources)
        return
    types = set(rule.resource_types)
    for resource in resources:
        if resource.type in types:
            yield from resource_violations(rule, resource)


def resource_violations(rule: Rule, resource: PolicyResource) -> Iterator[Violation]:
    """The violations of a resource-level rule by one resource."""
    if rule.id in checks.POOL_CHECKS:
        for pool in checks.pools_of(resource):
            yield from checks.POOL_CHECKS[rule.id](pool)
    else:
        yield from checks.RESOURCE_CHECKS[rule.id](resource)


def expired(waiver: WaiverLike, today: date) -> bool:
    """Whether the waiver's last day is before `today`."""
    return waiver.expires is not None and date.fromisoformat(waiver.expires) < today


def covers(waiver: WaiverLike, rule_id: str, subject: str) -> bool:
    """Whether the waiver names the rule and one of its patterns matches the subject."""
    return waiver.rule == rule_id and any(fnmatch.fnmatchcase(subject, pattern) for pattern in waiver.resources)


def waiver_for(rule_id: str, subject: str, waivers: Sequence[WaiverLike], today: date) -> int | None:
    """The index of the first unexpired waiver covering `rule_id` for `subject`, if any."""
    for index, waiver in enumerate(waivers):
        if covers(waiver, rule_id, subject) and not expired(waiver, today):
            return index
    return None


def evaluate(resources: Sequence[PolicyResource], waivers: Sequence[WaiverLike] = (), *,
             today: date) -> PolicyReport:
    """Every rule over `resources`, in catalog order, each finding matched against `waivers`."""
    report = PolicyReport(waivers=waivers)
    used: set[int] = set()
    for rule in rules():
        for violation in violations(rule, resources):
            index = waiver_for(rule.id, violation.subject, waivers, today)
            if index is not None:
                used.add(index)
            report.findings.append(Finding(rule, violation, index))
    report.expired = [index for index, waiver in enumerate(waivers) if expired(waiver, today)]
    report.unused = [index for index in range(len(waivers)) if index not in used and index not in report.expired]
    return report
