"""`aksgpu new`: start a team's own infrastructure repository (aksgpu/ci/scaffold.py does the work)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from aksgpu.cli.arguments import preset_names
from aksgpu.cli.console import fail, fail_problems
from aksgpu.errors import UserError


def new(
    directory: Annotated[Path, typer.Argument(help="The new repository's folder (new or empty).")],
    preset: Annotated[str, typer.Option(
        "--preset", "-p", metavar="PRESET", help="The preset of the first environment (aksgpu presets list).",
        autocompletion=preset_names)] = "dev",
    environment: Annotated[str, typer.Option(
        "--environment", "-e", metavar="ENV", help="The first environment's name (also its Pulumi stack).")] = "dev",
    location: Annotated[str | None, typer.Option(metavar="REGION", help="Azure region, e.g. eastus2.")] = None,
    admin_group: Annotated[list[str] | None, typer.Option(
        "--admin-group", metavar="OBJECT_ID",
        help="Object ID of an Entra ID group that administers the cluster (repeatable).")] = None,
    github: Annotated[bool, typer.Option("--github/--no-github", help="Also write the GitHub workflows "
                                         "(`aksgpu ci github`).")] = True,
    aksgpu_source: Annotated[str | None, typer.Option(
        "--aksgpu-source", metavar="SOURCE",
        help="Where the project installs aksgpu from (aksgpu is not on PyPI): a wheel file (copied into vendor/), "
             "https://.../aksgpu-X-py3-none-any.whl#sha256=<hash>, git+https://HOST/PATH@<40-hex commit>, or "
             "index+https://HOST/.../simple/ (this version, --index-url). Default: where this aksgpu was installed "
             "from (a wheel or a git commit).")] = None,
) -> None:
    """Start your own infrastructure repository: a Pulumi project that uses aksgpu, a first environment and its CI.

    Writes Pulumi.yaml, a two-line __main__.py (aksgpu's program), requirements.txt naming where
    aksgpu is installed from (--aksgpu-source), .gitignore, a README, stacks/ with the first
    environment rendered (--admin-group goes into defaults.overrides: every environment gets it),
    and the GitHub workflows (at the root of the git repository DIR is in, if any). DIR must be new
    or empty; nothing is written unless all of it can be. Exit codes: 0 written, 1 the first
    environment's spec has errors, 2 bad input.
    """
    from importlib.metadata import PackageNotFoundError, version

    from aksgpu.ci.install_source import resolve_source
    from aksgpu.ci.scaffold import new_project
    from aksgpu.environments.initialize import InitRequest
    from aksgpu.spec import SpecError

    request = InitRequest(environment=environment, preset=preset, location=location,
                          admin_groups=admin_group or [], admin_groups_in_defaults=True)
    try:
        try:
            aksgpu_version = version("aksgpu")
        except PackageNotFoundError:
            aksgpu_version = "0"
        source = resolve_source(aksgpu_source, aksgpu_version)
        project = new_project(directory, request, source, github=github)
    except SpecError as error:
        fail_problems(error)
    except UserError as error:
        fail(error)
    for path in project.written:
        typer.echo(f"{path}: created")
    typer.echo(f"Next: cd {directory}, `python3.11 -m venv .venv && .venv/bin/pip install -r requirements.txt`, "
               f"then `.venv/bin/aksgpu plan {environment}`; commit, and push to see the checks run.")
