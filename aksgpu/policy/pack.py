"""The Pulumi policy pack: the same checks as the offline plan, run by a real `pulumi preview` or
`pulumi up --policy-pack policy`.

A project's policy/__main__.py calls `run()` (policy/ as `aksgpu new` writes it). Each rule of
rules.yaml becomes one policy of the same name, mandatory or advisory as the catalog says; rules
over several resources are stack policies. An environment's waivers reach the pack as policy
configuration (`pack_config`), which `aksgpu preview` and `aksgpu up` write and pass with
--policy-pack-config; a finding whose waiver covers it is not reported, and one whose waiver has
expired is reported with that said. pulumi-policy is imported only here (`pip install aksgpu[policy]`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

from aksgpu.policy.catalog import STACK, Rule, rules
from aksgpu.policy.checks import PolicyResource, Violation
from aksgpu.policy.engine import WaiverLike, covers, describe, expired, resource_violations, violations, waiver_for

PACK_NAME = "aksgpu"


@dataclass(frozen=True)
class ConfiguredWaiver:
    """A waiver as the pack's configuration carries it."""

    rule: str
    resources: list[str]
    reason: str
    expires: str | None = None


def pack_config(waivers: Sequence[WaiverLike]) -> dict[str, dict[str, Any]]:
    """The policy pack configuration (the JSON of --policy-pack-config) that carries `waivers`
    (spec Waivers) to the policies they waive."""
    config: dict[str, dict[str, Any]] = {}
    for waiver in waivers:
        config.setdefault(waiver.rule, {"waivers": []})["waivers"].append(
            {"resources": list(waiver.resources), "reason": waiver.reason, "expires": waiver.expires})
    return config


def _waivers(rule: Rule, config: Mapping[str, Any]) -> list[ConfiguredWaiver]:
    return [ConfiguredWaiver(rule.id, list(entry.get("resources") or ["*"]), str(entry.get("reason", "")),
                             entry.get("expires")) for entry in config.get("waivers") or []]


def _message(rule: Rule, violation: Violation, lapsed: ConfiguredWaiver | None) -> str:
    text = f"{describe(rule, violation)} Why: {rule.reason} Fix: {rule.fix} ({'; '.join(rule.sources)})"
    if lapsed is not None:
        text += f" Its waiver expired on {lapsed.expires}."
    return text


def unwaived(rule: Rule, found: Sequence[Violation], config: Mapping[str, Any],
             today: date) -> list[tuple[Violation, str]]:
    """The violations no current waiver in `config` covers, each with the message to report."""
    waivers = _waivers(rule, config)
    reported = []
    for violation in found:
        if waiver_for(rule.id, violation.subject, waivers, today) is None:
            lapsed = next((w for w in waivers if covers(w, rule.id, violation.subject) and expired(w, today)), None)
            reported.append((violation, _message(rule, violation, lapsed)))
    return reported


def _resource(args: Any) -> PolicyResource:
    return PolicyResource(args.urn, args.resource_type, args.name, args.props)


def policies() -> list[Any]:
    """One pulumi-policy Policy per rule of the catalog."""
    from pulumi_policy import (
        EnforcementLevel,
        PolicyConfigSchema,
        ResourceValidationPolicy,
        Severity,
        StackValidationPolicy,
    )

    schema = PolicyConfigSchema(properties={"waivers": {
        "type": "array", "items": {"type": "object", "properties": {
            "resources": {"type": "array", "items": {"type": "string"}}, "reason": {"type": "string"},
            "expires": {"type": ["string", "null"]}}}}})
    made: list[Any] = []
    for rule in rules():
        common: dict[str, Any] = {"name": rule.id, "description": rule.title, "config_schema": schema,
                  "enforcement_level": EnforcementLevel.MANDATORY if rule.enforcement == "mandatory"
                  else EnforcementLevel.ADVISORY,
                  "severity": Severity(rule.severity), "remediation_steps": rule.fix}
        if STACK in rule.applies_to:
            made.append(StackValidationPolicy(validate=_stack_validation(rule), **common))
        else:
            made.append(ResourceValidationPolicy(validate=_resource_validation(rule), **common))
    return made


def _resource_validation(rule: Rule) -> Any:
    types = set(rule.resource_types)

    def validate(args: Any, report_violation: Any) -> None:
        if args.resource_type not in types:
            return
        found = list(resource_violations(rule, _resource(args)))
        for _, message in unwaived(rule, found, args.get_config(), date.today()):
            report_violation(message)
    return validate


def _stack_validation(rule: Rule) -> Any:
    def validate(args: Any, report_violation: Any) -> None:
        found = list(violations(rule, [_resource(resource) for resource in args.resources]))
        for violation, message in unwaived(rule, found, args.get_config(), date.today()):
            report_violation(message, violation.resource.urn)
    return validate


def run() -> None:
    """Serve the pack to the Pulumi engine (a policy pack's __main__.py); does not return."""
    from pulumi_policy import EnforcementLevel, PolicyPack

    PolicyPack(name=PACK_NAME, policies=policies(), enforcement_level=EnforcementLevel.MANDATORY,
               description="aksgpu's security policies for AKS GPU clusters (`aksgpu policy list`)")
