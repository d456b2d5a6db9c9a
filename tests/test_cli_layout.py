"""The layout of aksgpu/cli/ (docs/architecture.md, "Layout"): one subpackage per concern, each saying what it
owns; a thin app.py; modules a newcomer can read in one sitting; nothing heavy imported before a
command runs; and the components layer knows nothing of the CLI."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

CLI = REPO / "aksgpu" / "cli"
CONCERNS = ("project", "environments", "plan", "workflow", "ci", "policy", "preflight")
MAX_MODULE_LINES = 420  # "about 400": a module a newcomer reads in one sitting


def _modules(folder: Path) -> list[Path]:
    return sorted(path for path in folder.rglob("*.py") if "__pycache__" not in path.parts)


def test_each_concern_is_a_subpackage_that_says_what_it_owns() -> None:
    packages = sorted(path.parent.name for path in CLI.glob("*/__init__.py"))
    assert packages == sorted(CONCERNS)
    for concern in CONCERNS:
        docstring = ast.get_docstring(ast.parse((CLI / concern / "__init__.py").read_text(encoding="utf-8")))
        assert docstring and len(docstring) > 60, f"cli/{concern}/__init__.py should say what it owns"


@pytest.mark.parametrize("module", _modules(CLI), ids=lambda path: str(path.relative_to(CLI)))
def test_no_module_is_over_about_400_lines(module: Path) -> None:
    lines = len(module.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_MODULE_LINES, f"{module.relative_to(REPO)} has {lines} lines; split it by what it does"


def test_app_only_wires_commands() -> None:
    """app.py defines no command of its own: every command lives with the code of its concern."""
    tree = ast.parse((CLI / "app.py").read_text(encoding="utf-8"))
    commands = [node.name for node in tree.body if isinstance(node, ast.FunctionDef)
                and any("command" in ast.unparse(decorator) for decorator in node.decorator_list)]
    assert commands == []
    registered = {node.value.func.value.id for node in tree.body if isinstance(node, ast.Expr)
                  and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Attribute)
                  and node.value.func.attr == "register" and isinstance(node.value.func.value, ast.Name)}
    assert registered == {"plan_commands", "environment_commands", "workflow_commands", "preflight_commands"}


def test_the_app_imports_nothing_heavy_before_a_command_runs() -> None:
    """Every command, and `aksgpu --help`, pays for importing the app: Pulumi, the spec (pydantic),
    YAML, jinja2, rich and the components are imported only by the commands that use them."""
    code = ("import sys; import aksgpu.cli.app; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'pulumi', 'yaml', 'pydantic', 'rich', 'jinja2'}"
            " | {m for m in sys.modules if m.startswith('aksgpu.components')}))")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize("module", _modules(REPO / "aksgpu" / "components") + [REPO / "aksgpu" / "program.py"]
                         + _modules(REPO / "aksgpu" / "preflight"),
                         ids=lambda path: str(path.relative_to(REPO)))
def test_components_know_nothing_of_the_cli(module: Path) -> None:
    """One direction of data: the CLI reads the spec and runs the components, never the reverse."""
    tree = ast.parse(module.read_text(encoding="utf-8"))
    imported = [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    imported += [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    assert not [name for name in imported if name.startswith("aksgpu.cli")]
