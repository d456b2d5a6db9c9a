"""Shared fixtures: the example plans, made once per session."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from aksgpu.plan.planner import Plan, plan_stack
from aksgpu.project.stackfile import resolve_stack
from tests.helpers import EXAMPLE, EXAMPLES, copy_project


@pytest.fixture(scope="session")
def example_plans() -> dict[str, Plan]:
    return {env: plan_stack(resolve_stack(env, cwd=EXAMPLE)) for env in EXAMPLES}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the project (program, environments and stacks) to run commands in; the current folder."""
    monkeypatch.chdir(copy_project(EXAMPLE, tmp_path))
    return tmp_path


@pytest.fixture
def no_cloud_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No credentials, backend, passphrase or stand-in settings from the machine running the tests."""
    import os

    for name in list(os.environ):
        if name.startswith(("ARM_", "AZURE_", "PULUMI_", "FAKE_AZ")):
            monkeypatch.delenv(name)


@pytest.fixture
def empty_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the project with no environments and no stacks yet."""
    for name in ("Pulumi.yaml", "__main__.py"):
        shutil.copy(EXAMPLE / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    return tmp_path
