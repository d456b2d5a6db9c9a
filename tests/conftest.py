"""Shared fixtures: the example plans, made once per session."""

from __future__ import annotations

import pytest

from cli.planner import Plan, plan_stack
from cli.stackfile import resolve_stack
from tests.helpers import EXAMPLES, REPO


@pytest.fixture(scope="session")
def example_plans() -> dict[str, Plan]:
    return {env: plan_stack(resolve_stack(env, cwd=REPO)) for env in EXAMPLES}
