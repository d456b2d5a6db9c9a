"""aksgpu's layout (docs: architecture): top-level packages by concern, each saying what it owns;
imports go one way, written below as data; no import cycle, function-local imports included; the
command line is Typer wiring; modules a newcomer can read in one sitting."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import REPO, imported_top_levels

PACKAGE = REPO / "aksgpu"
CLI = PACKAGE / "cli"
# Which of aksgpu's top-level packages each one may import (besides itself). The direction of data:
# cli -> workflow, ci, plan -> components, program -> environments, project, preflight -> spec
# -> policy's rule catalog -> catalog, errors. node/ runs on GPU nodes: catalog and errors only.
# stack_config.py (the stack config keys) imports nothing; every layer from spec/ up may import it.
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "stack_config": set(),
    "catalog": set(),
    "templates": set(),
    "policy": {"catalog", "errors"},
    "spec": {"policy", "catalog", "stack_config", "errors"},
    "node": {"catalog", "errors"},
    "project": {"spec", "catalog", "stack_config", "errors"},
    "environments": {"project", "spec", "policy", "catalog", "stack_config", "errors"},
    "preflight": {"project", "spec", "catalog", "stack_config", "errors"},
    "promotion": {"preflight", "environments", "project", "spec", "errors"},
    "components": {"node", "spec", "catalog", "stack_config", "errors"},
    "program": {"components", "spec", "catalog", "stack_config", "errors"},
    "plan": {"preflight", "environments", "project", "program", "spec", "policy", "catalog", "stack_config",
             "errors"},
    "workflow": {"components", "program", "environments", "project", "spec", "catalog", "stack_config", "errors"},
    "ci": {"plan", "workflow", "preflight", "environments", "project", "spec", "policy", "catalog", "stack_config",
           "errors"},
    "cli": {"ci", "workflow", "plan", "program", "components", "preflight", "promotion", "environments", "project",
            "spec", "policy", "catalog", "stack_config", "errors"},
}
MAX_MODULE_LINES = 420  # "about 400": a module a newcomer reads in one sitting
# Modules over the limit, at their size: none may grow, and each leaves this table once split
# (the test says when). None today.
OVERSIZED: dict[str, int] = {}
# cli/ modules that are not commands: what every command shares.
# console.py: what commands share to print; entry.py: the console script, standard library only so that
# Ctrl-C while Typer and the commands load is caught (it imports app.py inside its guard);
# short_help.py: the text of `aksgpu --help` that entry.py prints without Typer, from short_help_table.py
# (derived from the app by tools/regenerate.py).
CLI_HELPERS = {"console.py", "entry.py", "short_help.py", "short_help_table.py"}


def _modules(folder: Path) -> list[Path]:
    return sorted(path for path in folder.rglob("*.py") if "__pycache__" not in path.parts)


def _name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(path): path for path in _modules(PACKAGE)}


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            found |= {id(inner) for statement in node.body for inner in ast.walk(statement)}
    return found


def _imports(path: Path, runtime_only: bool = False) -> Iterator[str]:
    """The aksgpu modules `path` imports, wherever the import is (module level or in a function);
    `from package import module` names the module. With runtime_only, not those under TYPE_CHECKING."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = _type_checking_nodes(tree) if runtime_only else set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            submodules = [f"{node.module}.{alias.name}" for alias in node.names]
            names = [name for name in submodules if name in MODULES]
            if len(names) < len(submodules):
                names.append(node.module)
        else:
            assert not isinstance(node, ast.ImportFrom), f"{path}: a relative import; aksgpu imports absolutely"
            continue
        for name in names:
            if name == "aksgpu" or name.startswith("aksgpu."):
                while name not in MODULES:
                    name = name.rpartition(".")[0]
                yield name


def _package(module: str) -> str:
    return module.split(".")[1] if module.count(".") else module


def test_every_top_level_package_is_in_the_layer_table() -> None:
    found = {path.name for path in PACKAGE.iterdir() if path.is_dir() and path.name != "__pycache__"}
    found |= {path.stem for path in PACKAGE.glob("*.py") if path.stem != "__init__"}
    assert found == set(ALLOWED)


@pytest.mark.parametrize("module", sorted(MODULES), ids=str)
def test_imports_follow_the_direction_of_data(module: str) -> None:
    own = _package(module)
    if module == "aksgpu":
        return
    wrong = sorted({name for name in _imports(MODULES[module]) if name != "aksgpu"
                    and _package(name) != own and _package(name) not in ALLOWED[own]})
    assert wrong == [], f"{module} ({own}/) may import only {sorted(ALLOWED[own])}, not {wrong}"


def test_no_import_cycle_anywhere() -> None:
    """Between modules, function-local imports included (imports under TYPE_CHECKING run never and
    are left out); a cycle is printed with its modules."""
    graph = {module: {name for name in _imports(path, runtime_only=True) if name != module}
             for module, path in MODULES.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(module: str) -> None:  # Tarjan's strongly connected components
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in graph[module]:
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph)))
    for module in sorted(graph):
        if module not in index:
            visit(module)
    assert cycles == []


def test_the_cycle_test_finds_a_cycle(tmp_path: Path) -> None:
    """The helper above reads function-local imports: a cycle hidden in a function is one."""
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from aksgpu.spec import base\n", encoding="utf-8")
    assert list(_imports(module)) == ["aksgpu.spec.base"]


@pytest.mark.parametrize("package", sorted(name for name in ALLOWED if (PACKAGE / name / "__init__.py").exists()))
def test_each_package_says_what_it_owns(package: str) -> None:
    docstring = ast.get_docstring(ast.parse((PACKAGE / package / "__init__.py").read_text(encoding="utf-8")))
    assert docstring and len(docstring) > 60, f"aksgpu/{package}/__init__.py should say what it owns"


@pytest.mark.parametrize("module", _modules(CLI), ids=lambda path: str(path.relative_to(CLI)))
def test_the_command_line_is_typer_wiring(module: Path) -> None:
    """Domain logic lives in its own package; cli/ holds commands (and what they share to print)."""
    if module.name == "__init__.py" or module.name in CLI_HELPERS:
        return
    imported = set(_imports(module))
    typer = "import typer" in module.read_text(encoding="utf-8") or "from typer" in module.read_text(encoding="utf-8")
    assert typer, f"{module.relative_to(REPO)} does not use Typer: move it to the package of its concern"
    assert imported or module.name == "arguments.py"


@pytest.mark.parametrize("module", _modules(PACKAGE), ids=lambda path: str(path.relative_to(REPO)))
def test_no_module_is_over_about_400_lines(module: Path) -> None:
    lines = len(module.read_text(encoding="utf-8").splitlines())
    where = str(module.relative_to(REPO))
    if where in OVERSIZED:
        assert lines <= OVERSIZED[where], f"{where} grew to {lines} lines; it is to be split, not grown"
        assert lines > MAX_MODULE_LINES, f"{where} is {lines} lines now: take it out of OVERSIZED"
        return
    assert lines <= MAX_MODULE_LINES, f"{where} has {lines} lines; split it by what it does"


def test_app_only_wires_commands() -> None:
    """app.py defines no command of its own: every command lives with the code of its concern."""
    tree = ast.parse((CLI / "app.py").read_text(encoding="utf-8"))
    commands = [node.name for node in tree.body if isinstance(node, ast.FunctionDef)
                and any("command" in ast.unparse(decorator) for decorator in node.decorator_list)]
    assert commands == []
    registered = {node.value.func.value.id for node in ast.walk(tree) if isinstance(node, ast.Expr)
                  and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Attribute)
                  and node.value.func.attr == "register" and isinstance(node.value.func.value, ast.Name)}
    assert registered == {"plan_commands", "environment_commands", "workflow_commands", "preflight_commands",
                          "promotion_commands"}


def test_the_app_imports_nothing_heavy_before_a_command_runs() -> None:
    """Every command, and `aksgpu --help`, pays for importing the app: Pulumi, the spec (pydantic),
    YAML, jinja2, rich and the components are imported only by the commands that use them."""
    code = ("import sys; import aksgpu.cli.app; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'pulumi', 'yaml', 'pydantic', 'rich', 'jinja2'}"
            " | {m for m in sys.modules if m.startswith(('aksgpu.components', 'aksgpu.spec'))}))")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_node_programs_import_nothing_of_pulumi() -> None:
    """aksgpu/node runs in the cluster (ConfigMaps, the check's image): the standard library, the
    check's PyTorch, NVML and PyYAML, and of aksgpu only the catalog."""
    # In the cluster a program imports its sibling files by their own names (node_api from
    # node_gate.py and fabric_acceptance.py: files mounted side by side from ConfigMaps).
    allowed = set(sys.stdlib_module_names) | {"torch", "pynvml", "yaml", "aksgpu"}
    allowed |= {path.stem for path in (PACKAGE / "node").glob("*.py")}
    for path in _modules(PACKAGE / "node"):
        tops = imported_top_levels(path.read_text(encoding="utf-8"))
        assert tops <= allowed, (path.name, sorted(tops - allowed))
