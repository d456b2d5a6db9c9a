"""The linter and the type checker, as .ci/run runs them (configured in pyproject.toml): no findings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

BIN = Path(sys.executable).parent

pytestmark = pytest.mark.slow  # mypy over the package takes tens of seconds without its cache


def test_ruff_finds_nothing() -> None:
    result = subprocess.run([str(BIN / "ruff"), "check", "--no-cache", "aksgpu", "tests", "tools"], cwd=REPO,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_finds_nothing() -> None:
    result = subprocess.run([str(BIN / "mypy")], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
