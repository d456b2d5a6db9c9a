"""The one review of a plan (aksgpu/plan/review.py) and the domain's one problem type (aksgpu/errors.py)."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace
from typing import Any

import pytest

from aksgpu.errors import Problem, UserError, render_problems
from aksgpu.plan import review as review_module
from aksgpu.plan.review import Stacks
from aksgpu.spec import Issue, SpecError
from tests.helpers import FLEET_EXAMPLE


def test_a_command_resolves_and_plans_each_stack_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every member of a fleet reads its shared stack's outputs: one Stacks plans that stack once."""
    planned: Counter[str] = Counter()
    resolved: Counter[str] = Counter()

    def plan_stack(stack_file: Any, project: str | None, stack_outputs: Any) -> Any:
        planned[stack_file.stack] += 1
        return SimpleNamespace(outputs={"fleetName": "gpu-training"})

    def resolve_stack(target: str, cwd: Any = None) -> Any:
        resolved[target] += 1
        return real_resolve(target, cwd)

    real_resolve = review_module.resolve_stack
    monkeypatch.setattr(review_module, "plan_stack", plan_stack)
    monkeypatch.setattr(review_module, "resolve_stack", resolve_stack)
    stacks = Stacks()
    members = ["training-eastus2", "training-westus3", "training-canary", "training-upgrades"]
    for member in members:
        stacks.plan(stacks.resolve(member, FLEET_EXAMPLE))
    stacks.plan(stacks.resolve("training", FLEET_EXAMPLE))
    assert planned == Counter({stack: 1 for stack in [*members, "training"]})
    assert resolved == Counter({stack: 1 for stack in [*members, "training"]})


def test_the_spec_issue_is_the_domain_problem() -> None:
    assert Issue is Problem
    problem = Problem("nodePools[0].vmSize", "Standard_X", "not a VM size aksgpu knows", "use one of ...")
    assert str(problem) == 'nodePools[0].vmSize = "Standard_X": not a VM size aksgpu knows. Fix: use one of ...'


def test_a_user_error_carries_problems_or_a_message() -> None:
    assert str(UserError("no stack")) == "no stack" and UserError("no stack").problems == []
    problems = [Problem("name", "", "must not be empty", "name the cluster"),
                Problem("location", "x", "unknown region", "pick one", severity="warning")]
    error = UserError(problems=problems, source="aksgpu:cluster in Pulumi.dev.yaml")
    assert error.problems == problems
    assert str(error) == str(SpecError(problems, "aksgpu:cluster in Pulumi.dev.yaml")) == render_problems(
        "aksgpu:cluster in Pulumi.dev.yaml", problems) == (
        'aksgpu:cluster in Pulumi.dev.yaml has 1 problem:\n  - name = "": must not be empty. Fix: name the cluster')
