"""aksgpu as a package a team installs, outside this repository: the wheel and the user's path.

The wheel is built from this repository and installed, without its dependencies, into a fresh
virtualenv in a temporary folder; a .pth file lends that virtualenv the test environment's
packages (Pulumi, the Azure and Kubernetes SDKs) without its editable install of aksgpu (a .pth
file's folders are not searched for further .pth files). Every command then runs as the
virtualenv's own `aksgpu` script from a folder outside the repository, so a file missing from the
wheel (a template, a preset, a data table) fails here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
import yaml

from aksgpu.environments.presets import preset_names
from tests.helpers import REPO

pytestmark = pytest.mark.slow  # builds the wheel and installs it into fresh virtualenvs


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """aksgpu's wheel, built from this repository."""
    folder = tmp_path_factory.mktemp("dist")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(folder),
                            str(REPO)], capture_output=True, text=True, timeout=600, check=False)
    assert built.returncode == 0, built.stdout + built.stderr
    return next(folder.glob("aksgpu-*.whl"))


def _lend_dependencies(venv: Path) -> Path:
    """Let `venv` see the test environment's packages (Pulumi, the SDKs), so pip finds aksgpu's
    dependencies installed and needs no index; returns the virtualenv's python."""
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The `aksgpu` script of a fresh virtualenv with the built wheel installed."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert not [n for n in names if n.split("/")[0] in ("cli", "components", "templates", "tests", "examples")], names
    venv = tmp_path_factory.mktemp("wheel") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = _lend_dependencies(venv)
    done = subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--quiet", str(wheel)],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return venv / "bin" / "aksgpu"


def _aksgpu(script: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    return subprocess.run([str(script), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
                          check=False)


def _ok(script: Path, cwd: Path, *args: str) -> str:
    result = _aksgpu(script, cwd, *args)
    assert result.returncode == 0, f"aksgpu {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_the_installed_package_is_the_wheel_not_this_repository(installed: Path, tmp_path: Path) -> None:
    python = installed.with_name("python")
    where = subprocess.run([str(python), "-c", "import aksgpu; print(aksgpu.__file__, aksgpu.__version__)"],
                           cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(installed.parents[1])) and where.split()[1][0].isdigit()
    assert _ok(installed, tmp_path, "--version").startswith("aksgpu ")


def _readme_commands() -> list[str]:
    """The command lines of README.md's "Use aksgpu in your own repository" block."""
    import re

    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Use aksgpu in your own repository"):]
    block = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert block is not None
    return [line for line in block.group(1).splitlines() if line.strip()]


def _shell(bin_dir: Path, cwd: Path, line: str) -> str:
    """Run a command line as a user's shell would, with `bin_dir` first on PATH, offline: pip
    gets no index (PIP_NO_INDEX), so it installs from the files requirements.txt names and finds
    the dependencies installed (lent, see _lend_dependencies). A virtualenv the line makes gets
    them lent before the next line runs."""
    import shlex

    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", PIP_NO_INDEX="1",
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    result = subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
                            check=False)
    assert result.returncode == 0, f"{line} (in {cwd}):\n{result.stdout}\n{result.stderr}"
    words = shlex.split(line)
    if "venv" in words and "-m" in words:
        _lend_dependencies(cwd / words[words.index("venv") + 1])
    return result.stdout


def test_the_readme_path_runs_as_written_outside_this_repository(installed: Path, tmp_path: Path) -> None:
    """The README's path: `aksgpu new` (from the installed wheel, which is the default source), then
    the project's own virtualenv from its requirements.txt, and that virtualenv's aksgpu."""
    import shlex

    cwd = tmp_path
    ran = []
    for line in _readme_commands():
        command = shlex.split(line)
        if command[0] == "cd":
            cwd = cwd / command[1]
            continue
        output = _shell(installed.parent, cwd, line)  # the wheel's `aksgpu` on PATH, for `aksgpu new`
        ran.append(command[1] if command[0].endswith("aksgpu") else command[0])
        # After `aksgpu new`, each aksgpu is the project's own, installed from its requirements.txt.
        assert command[0] in ("python3.11", ".venv/bin/pip", ".venv/bin/aksgpu") or ran == ["new"], line
        if command[1:3] == ["plan", "prod"]:
            assert yaml.safe_load(output)["summary"]["resourceCount"] > 20
    assert ran[0] == "new" and {"python3.11", ".venv/bin/pip", "init", "render", "validate", "plan", "ci"} <= set(ran)
    project = tmp_path / "infra"
    requirements = (project / "requirements.txt").read_text().strip().splitlines()
    wheel = next((project / "vendor").glob("aksgpu-*.whl"))
    assert requirements[-1] == f"./vendor/{wheel.name}[policy]" and not any("==" in line for line in requirements
                                                                             if not line.startswith("#"))
    version = subprocess.run([str(project / ".venv" / "bin" / "python"), "-c", "import aksgpu, sys; "
                              "print(aksgpu.__file__, aksgpu.__version__)"], cwd=project, capture_output=True,
                             text=True, check=True).stdout.split()
    assert version[0].startswith(str(project / ".venv")) and wheel.name.startswith(f"aksgpu-{version[1]}-")
    assert "from aksgpu.program import run" in (project / "__main__.py").read_text()
    assert "*.bak" in (project / ".gitignore").read_text()
    # `new --admin-group` reaches `init prod` (defaults.overrides of environments.yaml).
    prod = yaml.safe_load((project / "stacks" / "Pulumi.prod.yaml").read_text())["config"]["aksgpu:cluster"]
    assert prod["access"]["aad"]["adminGroupObjectIds"] == ["5f0c4a8e-2b7d-4c1e-9a3f-6d8b1e2c7a90"]
    checks = (project / ".github" / "workflows" / "aksgpu-checks.yml").read_text()
    assert "pip install -r requirements.txt" in checks and "pytest" not in checks
    workflows = sorted((project / ".github" / "workflows").glob("*.yml"))
    valid = subprocess.run([str(Path(sys.executable).with_name("check-jsonschema")), "--builtin-schema",
                            "vendor.github-workflows", *map(str, workflows)], capture_output=True, text=True,
                            check=False)
    assert valid.returncode == 0, valid.stdout + valid.stderr


def test_a_new_project_installs_from_its_requirements_and_passes_its_own_checks(installed: Path, wheel: Path,
                                                                                 tmp_path: Path) -> None:
    """A project made with --aksgpu-source WHEEL runs its checks workflow's steps as written (the
    install step from its requirements.txt, offline), then takes every preset."""
    _ok(installed, tmp_path, "new", "infra", "--location", "eastus2", "--aksgpu-source", str(wheel))
    project = tmp_path / "infra"
    assert (project / "vendor" / wheel.name).read_bytes() == wheel.read_bytes()
    workflow = yaml.safe_load((project / ".github" / "workflows" / "aksgpu-checks.yml").read_text())
    steps = [step for step in workflow["jobs"]["offline"]["steps"] if "run" in step]
    install = steps[0]["run"]
    assert install == "python -m venv .venv && .venv/bin/pip install -r requirements.txt"
    # `python` is the runner's (setup-python): here the test environment's, whose folder holds one.
    python_dir = Path(sys.executable).parent
    subprocess.run([str(python_dir / "python"), "-m", "venv", str(project / ".venv")], check=True, timeout=300)
    _lend_dependencies(project / ".venv")  # before the step's own pip install, which then runs offline
    ran = []
    for step in steps:
        if step["run"].startswith(("python -m venv", ".venv/bin/aksgpu")):
            _shell(python_dir, project, step["run"])
            ran.append(step["run"].split()[1] if step["run"].startswith(".venv") else "install")
    assert ran == ["install", "render", "validate", "ci"], ran
    assert "| `dev` |" in (project / "aksgpu-summary.md").read_text()
    aksgpu = project / ".venv" / "bin" / "aksgpu"
    for preset in preset_names():
        _ok(aksgpu, project, "init", f"p{preset}", "--preset", preset, "--location", "westeurope")
    _ok(aksgpu, project, "validate")
    for preset in preset_names():
        _ok(aksgpu, project, "plan", f"p{preset}", "--json")


def test_every_preset_starts_an_environment_of_a_new_repository(installed: Path, tmp_path: Path) -> None:
    _ok(installed, tmp_path, "new", "infra", "--location", "eastus2", "--no-github")
    project = tmp_path / "infra"
    for preset in preset_names():
        _ok(installed, project, "init", f"p{preset}", "--preset", preset, "--location", "westeurope")
    _ok(installed, project, "render", "--check")
    _ok(installed, project, "validate")
    _ok(installed, project, "ci", "github")
    _ok(installed, project, "ci", "github", "--check")
    summary = _ok(installed, project, "ci", "summary")  # the checks workflow's plan of every environment
    assert all(f"| `p{preset}` |" in summary for preset in preset_names()) and "❌" not in summary


def test_new_never_writes_into_a_folder_with_something_in_it(installed: Path, tmp_path: Path) -> None:
    (tmp_path / "infra").mkdir()
    (tmp_path / "infra" / "notes.md").write_text("mine")
    result = _aksgpu(installed, tmp_path, "new", "infra", "--location", "eastus2")
    assert result.returncode == 2 and 'DIRECTORY argument = "infra": not an empty folder' in result.stderr
    assert sorted(p.name for p in (tmp_path / "infra").iterdir()) == ["notes.md"]


def test_new_writes_nothing_when_the_first_environment_is_invalid(installed: Path, tmp_path: Path) -> None:
    result = _aksgpu(installed, tmp_path, "new", "infra", "--preset", "nosuch", "--location", "eastus2")
    assert result.returncode == 2 and '--preset = "nosuch": no preset of that name' in result.stderr
    result = _aksgpu(installed, tmp_path, "new", "infra", "--location", "eastus22")
    assert result.returncode == 1 and "did you mean" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_new_fills_the_empty_current_folder(installed: Path, tmp_path: Path) -> None:
    (tmp_path / "true").mkdir()  # a folder name YAML would read as a boolean
    _ok(installed, tmp_path / "true", "new", ".", "--location", "eastus2", "--no-github")
    assert yaml.safe_load((tmp_path / "true" / "Pulumi.yaml").read_text())["name"] == "true"
    assert (tmp_path / "true" / "stacks" / "Pulumi.dev.yaml").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["true"]  # no staging folder left beside it
