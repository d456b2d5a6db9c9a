"""The docs site and the README: every derived file is current (tools/regenerate.py --check), the
site builds with warnings as errors, and the README stays what a newcomer reads in a few screens."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs_pages import docs_page, section

REPO = Path(__file__).resolve().parents[1]
QUICK_START = [
    "python3.11 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/aksgpu plan "
    "examples/gpu-clusters/stacks/Pulumi.prod.yaml",
    '.venv/bin/python -m pytest -m "not slow"',
]


@pytest.mark.slow
def test_every_derived_file_is_current() -> None:
    """The generated reference pages, the examples' JSON Schemas and rendered stacks are what
    `tools/regenerate.py` writes; --check names each stale file and writes nothing."""
    result = subprocess.run([sys.executable, str(REPO / "tools" / "regenerate.py"), "--check"], cwd=REPO,
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_the_docs_build_with_warnings_as_errors(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                             str(REPO / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
                            cwd=REPO, env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    getting_started = (tmp_path / "site" / "getting-started" / "index.html").read_text(encoding="utf-8")
    assert "5f0c4a8e-2b7d-4c1e-9a3f-6d8b1e2c7a90" in getting_started, "the README's own-repository block is included"


def test_the_readme_is_at_most_250_lines() -> None:
    assert len((REPO / "README.md").read_text(encoding="utf-8").splitlines()) <= 250


def test_the_readme_quick_start_is_its_two_commands() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    [block] = re.findall(r"```sh\n(.*?)```", section(readme, "Quick start"), re.S)
    assert block.splitlines() == QUICK_START


def test_ci_runs_every_test_the_quick_start_leaves_out() -> None:
    """The README's test command leaves out the slow tests; CI runs that very command, then the slow
    tests (no -k): together every test."""
    assert "-m \"not slow\"" in QUICK_START[1]
    lines = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert [line.strip() for line in lines if "-m pytest" in line] == [
        QUICK_START[1].strip(), ".venv/bin/python -m pytest -m slow"]


def test_only_docs_reference_imports_aksgpu_internals() -> None:
    """A move of aksgpu's packages is fixed for the docs in one file."""
    importing = [path.name for path in sorted((REPO / "tools").glob("*.py"))
                 if re.search(r"^\s*(from|import) aksgpu\b", path.read_text(encoding="utf-8"), re.M)]
    assert importing == ["docs_reference.py"]


def test_the_section_helper_stops_at_the_next_heading_of_its_level() -> None:
    text = docs_page("guides/gpus/training.md")
    gang = section(text, "How a user submits a gang job")
    assert gang.startswith("## How a user submits a gang job") and "\n## " not in gang
    assert "# stacks/environments.yaml" in section(docs_page("guides/environments.md"), "Environments, presets")
