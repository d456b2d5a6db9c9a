"""Shared fixtures: the example plans, made once per session."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from aksgpu.plan.planner import Plan, plan_stack
from aksgpu.project.stackfile import resolve_stack
from tests.helpers import EXAMPLE, EXAMPLES, FLEET_EXAMPLE, copy_project


# The files that take longest (docs/verification/figures.md): mypy without its cache, the fuzz tests,
# the package build and the scaffold round trips.
LONGEST_FIRST = ("test_static_checks.py", "test_fuzz.py", "test_package.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files with slow tests run first, the longest of them before the rest, each file's tests in
    their own order. Under xdist's loadfile distribution a long file that starts last keeps the run
    going on one core while the other has nothing left; started first, it runs beside the short ones."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}

    def rank(item: pytest.Item) -> tuple[int, int]:
        name = item.path.name
        return (LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST),
                0 if item.path in slow_files else 1)

    items.sort(key=rank)


@pytest.fixture(scope="session")
def example_plans() -> dict[str, Plan]:
    return {env: plan_stack(resolve_stack(env, cwd=EXAMPLE)) for env in EXAMPLES}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the project (program, environments and stacks) to run commands in; the current folder."""
    monkeypatch.chdir(copy_project(EXAMPLE, tmp_path))
    return tmp_path


@pytest.fixture
def fleet_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the fleet example to run commands in; the current folder."""
    monkeypatch.chdir(copy_project(FLEET_EXAMPLE, tmp_path))
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
