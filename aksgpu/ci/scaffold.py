"""`aksgpu new DIR`: a team's own infrastructure repository, with a first environment.

What it writes comes from aksgpu/templates/project/ (Pulumi.yaml, the two-line program,
requirements.txt naming where aksgpu is installed from (ci/install_source.py), .gitignore, a README
for the team), then `aksgpu init`
adds the first environment (environments.yaml, its schema, the stack file) and `aksgpu ci github`
the workflows, so the repository's own checks pass from its first commit. Nothing of aksgpu's
own tests or examples goes there. DIR must be new or empty: nothing there is ever replaced.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aksgpu.errors import Problem, UserError
from aksgpu.project.files import write_text_atomically

if TYPE_CHECKING:
    import jinja2

    from aksgpu.ci.install_source import InstallSource
    from aksgpu.environments.initialize import InitRequest

PROJECT_TEMPLATES = Path(__file__).resolve().parents[1] / "templates" / "project"
# template -> file in the new repository
PROJECT_FILES = {
    "Pulumi.yaml.j2": "Pulumi.yaml",
    "__main__.py.j2": "__main__.py",
    "requirements.txt.j2": "requirements.txt",
    "gitignore.j2": ".gitignore",
    "README.md.j2": "README.md",
    "policy/PulumiPolicy.yaml.j2": "policy/PulumiPolicy.yaml",
    "policy/__main__.py.j2": "policy/__main__.py",
}


@dataclass(frozen=True)
class NewProject:
    directory: Path
    written: list[Path]


def project_name(directory: Path) -> str:
    """A Pulumi project name from the folder's name (letters, digits, '-', '_' and '.')."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", directory.resolve().name).strip("-.") or "gpu-clusters"
    return name[:100]


def new_project(directory: Path, first: InitRequest, source: InstallSource | None = None, *,
                github: bool = True) -> NewProject:
    """Write a new project into `directory` with `first` as its first environment, installing
    aksgpu from `source` (default: where the running aksgpu was installed from).

    Everything is written into a hidden folder beside `directory` and renamed into place at the
    end, so a first environment with errors (or Ctrl-C) leaves no half-made repository.
    """
    from importlib.metadata import PackageNotFoundError, version

    try:
        if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
            raise UserError(problems=[Problem("DIRECTORY argument", str(directory), "not an empty folder, and "
                                              "`aksgpu new` never replaces what is there", "name a new or empty folder "
                                              "(or use `aksgpu init` inside an existing project)")])
    except OSError as error:
        raise UserError(problems=[Problem("DIRECTORY argument", str(directory), f"cannot read it: {error.strerror}",
                                          "name a folder you can write to")]) from None
    try:
        aksgpu_version = version("aksgpu")
    except PackageNotFoundError:
        raise UserError("aksgpu is not installed as a package, so `aksgpu new` cannot pin its version. Fix: "
                        "install it (`pip install aksgpu` or `pip install -e .` in its repository).") from None
    if source is None:
        from aksgpu.ci.install_source import resolve_source

        source = resolve_source(None, aksgpu_version)
    values = {"project": project_name(directory), "version": aksgpu_version, "environment": first.environment,
              "source_lines": list(source.lines)}
    from aksgpu.ci.pipelines import GITHUB_WORKFLOWS, repository_root

    # GitHub runs only the workflows at a repository's root: a project made inside an existing git
    # repository gets them there, running in its folder (https://docs.github.com/en/actions/
    # writing-workflows/about-workflows: "stored in the .github/workflows directory in a
    # repository"; checked 2026-11-27).
    root = repository_root(directory)
    at_root = github and root != directory.resolve()
    if at_root:
        taken = [path for path in GITHUB_WORKFLOWS.values() if (root / path).exists()]
        if taken:
            raise UserError(f"{root / taken[0]} exists: the repository {root} already has aksgpu's workflows (another "
                            "project's?), and `aksgpu new` never replaces a file. Fix: pass --no-github and extend "
                            "them by hand, or make the project in a repository of its own.")
    staging: Path | None = None
    try:
        directory.resolve().parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{directory.resolve().name}.", dir=directory.resolve().parent))
        relative = _write_project(staging, first, values, source, github and not at_root)
        if directory.exists():  # empty (checked above), and maybe the current folder: fill it
            for entry in staging.iterdir():
                os.replace(entry, directory / entry.name)
        else:
            os.replace(staging, directory)
            staging = None
    except OSError as error:
        raise UserError(problems=[Problem("DIRECTORY argument", str(directory), f"cannot write it: {error.strerror}",
                                          "name a folder you can write to")]) from None
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    written = [directory / path for path in relative]
    if at_root:
        from aksgpu.ci.pipelines import ci_settings, render_github

        try:
            for path, text in render_github(ci_settings(directory, root=root)).items():
                write_text_atomically(root / path, text)
                written.append(root / path)
        except OSError as error:
            raise UserError(f"cannot write the workflows under {root}: {error.strerror}. Fix: make .github/workflows "
                            "there writable, then run `aksgpu ci github` in the project.") from None
    return NewProject(directory, written)


def _write_project(root: Path, first: InitRequest, values: dict[str, Any], source: InstallSource,
                   github: bool) -> list[Path]:
    """The project's files under `root`; returns their paths relative to it."""
    from aksgpu.ci.install_source import vendor_wheel
    from aksgpu.environments.initialize import add_environment

    written = []
    wheel = vendor_wheel(source, root)
    if wheel is not None:
        written.append(wheel)
    for template, target in PROJECT_FILES.items():
        write_text_atomically(root / target, _templates().get_template(template).render(**values))
        written.append(Path(target))
    (root / "stacks").mkdir(exist_ok=True)
    add_environment(first, project_dir=root)
    written += sorted(path.relative_to(root) for path in (root / "stacks").iterdir())
    if github:
        from aksgpu.ci.pipelines import ci_settings, render_github

        for relative, text in render_github(ci_settings(root)).items():
            write_text_atomically(root / relative, text)
            written.append(Path(relative))
    return written


@functools.cache
def _templates() -> jinja2.Environment:
    import jinja2

    return jinja2.Environment(loader=jinja2.FileSystemLoader(PROJECT_TEMPLATES), undefined=jinja2.StrictUndefined,
                              keep_trailing_newline=True, autoescape=False)
