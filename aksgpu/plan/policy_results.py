"""aksgpu's security policies (aksgpu.policy) over an offline plan: the resources it recorded, the
environment's waivers and today's date (waivers expire). A plan's whole review (policies, cost,
deploy time) is plan/review.py's."""

from __future__ import annotations

from datetime import date

from aksgpu.plan.planner import Plan
from aksgpu.spec import ClusterSpec, Waiver
from aksgpu.policy.checks import PolicyResource
from aksgpu.policy.engine import PolicyReport, evaluate


def evaluate_plan(plan: Plan, spec: ClusterSpec, today: date | None = None) -> PolicyReport:
    """Every policy over the plan's resources, with the spec's waivers."""
    return evaluate_resources(plan, spec.policy.waivers, today)


def evaluate_resources(plan: Plan, waivers: list[Waiver], today: date | None = None) -> PolicyReport:
    """Every policy over the plan's resources (a fleet's shared stack has no waivers)."""
    resources = [PolicyResource(r.urn, r.type, r.name, r.inputs) for r in plan.resources]
    return evaluate(resources, waivers, today=today or date.today())


def policy_lines(report: PolicyReport) -> list[str]:
    """The plan's policy section as text: failing findings, then advisory ones, then a count."""
    counts = report.counts()
    lines = [f"Policy: {counts['rules']} rules, {counts['findings']} findings: {counts['failing']} failing, "
             f"{counts['advisory']} advisory, {counts['waived']} waived (`aksgpu policy list` explains each rule)"]
    lines += [f"  error: {line}" for line in report.problems()]
    lines += [f"  note: {line}" for line in report.notes()]
    return lines
