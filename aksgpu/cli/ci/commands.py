"""The `aksgpu ci` commands: render CI for GitHub Actions or Azure Pipelines, the helpers those
pipelines call (the plan summary, the environments a change touches, the Azure DevOps comment),
and `oidc`, the identities the workflows sign in with."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from aksgpu.cli.arguments import CONTEXT_SETTINGS, EnvironmentsArg
from aksgpu.cli.console import fail, fail_input, fail_problems, progress, say
from aksgpu.errors import EXIT_FAILED

if TYPE_CHECKING:
    from aksgpu.ci.pipelines import CiSettings

ci_app = typer.Typer(help="CI for pull requests: offline checks, previews, gated deploys, drift checks.",
                     no_args_is_help=True, context_settings=CONTEXT_SETTINGS)

BranchOption = Annotated[str, typer.Option(help="The default branch: deploys run on merges to it.")]
CheckOption = Annotated[bool, typer.Option("--check", help="Write nothing; exit 1 and show a diff when a "
                                                           "rendered file is missing or out of date.")]
ForceOption = Annotated[bool, typer.Option("--force", help="Overwrite files edited by hand (kept as .bak).")]
OutputDirOption = Annotated[Path | None, typer.Option(
    "--output-dir", help="The repository root to write into (default: `ci github`, the git repository's root; "
                         "`ci azure-devops`, the project folder).")]


def _write_files(files: dict[str, str], root: Path, *, check: bool, force: bool, command: str) -> None:
    """Write (or with `check`, compare) rendered files; hand-edited ones are refused unless forced."""
    import difflib

    from aksgpu.errors import UserError
    from aksgpu.project.files import read_text_if_exists
    from aksgpu.project.generated import write_generated

    if check:
        stale = []
        for relative, text in files.items():
            path = root / relative
            existing = read_text_if_exists(path)
            if existing == text:
                typer.echo(f"{relative}: up to date")
                continue
            stale.append(relative)
            typer.echo(f"{relative}: {'missing' if existing is None else 'out of date'}")
            typer.echo("".join(difflib.unified_diff((existing or "").splitlines(keepends=True),
                                                    text.splitlines(keepends=True),
                                                    f"{relative} (on disk)", f"{relative} (rendered)")))
        if stale:
            typer.echo(f"{len(stale)} file(s) differ from what `{command}` writes. Fix: run it and commit the "
                       "result.", err=True)
            raise typer.Exit(1)
        return
    for relative, text in files.items():
        try:
            state, backup = write_generated(root / relative, text, force=force,
                                            fix=f"change the options or templates/ci/ and run `{command}` again")
        except UserError as error:
            fail(error)
        typer.echo(f"{relative}: {state}")
        if backup is not None:
            typer.echo(f"  the previous file was kept as {backup.relative_to(root)}")


def _render_ci(renderer: Callable[[CiSettings], dict[str, str]], command: str, branch: str,
               output_dir: Path | None, *, check: bool, force: bool, at_repository_root: bool = False,
               steps_from_repository_root: bool = False) -> CiSettings:
    """Render CI files for the project in the current folder, then write or check them under
    `output_dir`; by default the project folder, or with `at_repository_root` the root of the git
    repository it is in (the files then run the project's steps in its folder). With
    `steps_from_repository_root` the files stay in the project folder but their steps, which the CI
    system runs from the repository's root, run in the project's folder (Azure Pipelines)."""
    from aksgpu.ci.pipelines import ci_settings, repository_root
    from aksgpu.errors import UserError
    from aksgpu.project.stackfile import find_project_dir

    try:
        project_dir = find_project_dir(Path.cwd().resolve())
        root = output_dir or (repository_root(project_dir) if at_repository_root else project_dir)
        steps_root = root if at_repository_root else (
            repository_root(project_dir) if steps_from_repository_root else None)
        settings = ci_settings(project_dir, branch=branch, root=steps_root)
        files = renderer(settings)
    except UserError as error:
        fail(error)
    _write_files(files, root, check=check, force=force, command=command)
    return settings


@ci_app.command()
def github(
    branch: BranchOption = "main",
    output_dir: OutputDirOption = None,
    check: CheckOption = False,
    force: ForceOption = False,
) -> None:
    """Render the GitHub Actions workflows into .github/workflows/ at the repository's root.

    GitHub runs only the root's workflows: for a project in a subfolder of a git repository they
    go to the root (or --output-dir), run their steps in the project folder and trigger on changes
    under it. aksgpu-checks (render --check, validate, offline plans; no cloud credentials) and
    aksgpu-comment (the plan summary as one pull-request comment, updated) always; for
    environments with a shared state backend also aksgpu-preview (a real preview per changed
    environment, with Azure OIDC), aksgpu-deploy (pulumi up per environment behind GitHub
    environments, protected ones last) and aksgpu-drift (a daily drift check that opens an issue).
    """
    from aksgpu.ci.pipelines import render_github

    settings = _render_ci(render_github, "aksgpu ci github", branch, output_dir, check=check, force=force,
                          at_repository_root=True)
    if settings.local_only and not check:
        typer.echo(f"note: {', '.join(settings.local_only)} use the local state backend, so CI checks and plans "
                   "them offline but does not preview, deploy or drift-check them. Fix: give them a shared "
                   "backend in stacks/environments.yaml (`aksgpu backend bootstrap`), then run this again.")


@ci_app.command()
def summary(
    environments: EnvironmentsArg = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the markdown here.")] = None,
    commit: Annotated[str | None, typer.Option(help="The commit the summary is for (shown in it).")] = None,
) -> None:
    """Plan every environment offline and print the pull-request summary (markdown).

    Deterministic: the same stack files give the same bytes. Exit codes: 0 every environment
    planned, 1 some environment has errors or failing security policy findings (the summary still
    lists them), 2 bad input.
    """
    from aksgpu.errors import UserError
    from aksgpu.plan.summary import check_environments, summary_markdown

    from aksgpu.plan.workers import warm_up

    # The plan workers' server imports the planner while the environments are checked.
    warm_up(len(list(Path("stacks").glob("Pulumi.*.yaml"))))
    try:
        with progress("Planning every environment offline") as update:
            results = check_environments(environments or [], progress=update)
    except UserError as error:
        fail(error)
    text = summary_markdown(results, commit=commit)
    if output is None:
        typer.echo(text, nl=False)
    else:
        from aksgpu.project.files import write_text_atomically

        try:
            write_text_atomically(output, text)
        except UserError as error:
            fail(error)
        typer.echo(f"wrote {output}")
    if any(result.errors or (result.policy and result.policy["problems"]) for result in results):
        raise typer.Exit(1)


@ci_app.command()
def changed(
    base: Annotated[str, typer.Option(help="The commit to compare with (a pull request's base).")],
    head: Annotated[str, typer.Option(help="The commit with the change.")] = "HEAD",
    only: Annotated[str | None, typer.Option(
        help="Consider only these environments (comma-separated).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list (for a CI matrix).")] = False,
) -> None:
    """List the environments (stacks) whose preview a change can alter.

    All of them when the Pulumi program or aksgpu's version changed (__main__.py, Pulumi.yaml,
    pyproject.toml, requirements.txt, aksgpu/); otherwise those whose stacks/Pulumi.<env>.yaml
    changed. A fleet lists its stacks one by one: a member (or the upgrades stack) whose stack file
    changed, or every member and the upgrades stack when the fleet's shared stack changed.
    """
    from aksgpu.ci.pipelines import changed_environments, changed_files
    from aksgpu.environments.file import load_environments
    from aksgpu.errors import UserError
    from aksgpu.project.stackfile import stack_config_dir

    try:
        environments = load_environments()
        names = list(environments.stacks())  # environments, and each fleet's shared and member stacks
        fleets: dict[str, list[str]] = {}
        for stack, (environment, member) in environments.stacks().items():
            if member is not None:
                fleets.setdefault(environment, []).append(stack)
        if only:
            wanted = [name.strip() for name in only.split(",") if name.strip()]
            unknown = [name for name in wanted if name not in names]
            if unknown:
                fail_input("--only", only, f"names unknown environments: {', '.join(unknown)}",
                           f"use some of: {', '.join(names)}")
            names = [name for name in names if name in wanted]
        files = changed_files(environments.project_dir, base, head)
        result = changed_environments(files, names, stack_config_dir(environments.project_dir), fleets)
    except UserError as error:
        fail(error)
    typer.echo(json.dumps(result) if as_json else "\n".join(result))


@ci_app.command("azure-devops")
def azure_devops(
    branch: BranchOption = "main",
    output_dir: OutputDirOption = None,
    check: CheckOption = False,
    force: ForceOption = False,
) -> None:
    """Render the Azure Pipelines file .azure-pipelines/aksgpu.yml.

    The same checks as the GitHub workflows: offline checks and the plan summary on every pull
    request; for environments with a shared state backend, previews of changed environments on
    pull requests, deployment stages (Azure DevOps environments with approvals) on merges, and a
    scheduled drift check. Azure sign-in uses workload-identity-federation service connections
    named aksgpu-ENV-plan and aksgpu-ENV-deploy.
    """
    from aksgpu.ci.pipelines import render_azure_devops

    # Azure Pipelines runs every step from the repository's root ($(System.DefaultWorkingDirectory)),
    # wherever the pipeline file is: a project in a subfolder gets it as each step's workingDirectory.
    _render_ci(render_azure_devops, "aksgpu ci azure-devops", branch, output_dir, check=check, force=force,
               steps_from_repository_root=True)


@ci_app.command("azure-devops-comment")
def azure_devops_comment(
    file: Annotated[Path, typer.Argument(help="Markdown whose first line is an aksgpu marker "
                                              "(aksgpu ci summary writes one).")],
) -> None:
    """Post a file as the pull-request comment of an Azure Pipelines run, or update the one a
    previous run posted (the pipeline calls this; it needs SYSTEM_ACCESSTOKEN)."""
    import os

    from aksgpu.ci.comment import post_or_update
    from aksgpu.errors import UserError
    from aksgpu.project.files import read_text_if_exists

    try:
        body = read_text_if_exists(file)
    except UserError as error:
        fail(error)
    if body is None:
        fail_input("FILE argument", str(file), "there is no such file", "pass the file the previous step wrote")
    try:
        typer.echo(f"pull-request comment {post_or_update(body, os.environ)}")
    except UserError as error:
        fail(error)


@ci_app.command()
def oidc(
    environment: Annotated[str, typer.Argument(help="An environment of stacks/environments.yaml.")],
    repo: Annotated[str, typer.Option(
        "--repo", help="The GitHub repository, OWNER/REPO exactly as GitHub spells it.")],
    branch: Annotated[str, typer.Option(
        "--branch", help="The default branch: the drift check runs there, deploys only from there.")] = "main",
    subscription: Annotated[str | None, typer.Option(
        "--subscription", help="Subscription ID of the environment. Default: the Azure CLI's current one.")] = None,
    apply: Annotated[bool, typer.Option(
        "--apply", help="Run the commands with the Azure CLI instead of printing them.")] = False,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print the identities and steps as JSON (with --apply: the values to set).")] = False,
) -> None:
    """Print (or --apply) the az commands that create the environment's CI identities: app
    registrations with GitHub OIDC federated credentials and least-privilege role assignments.

    plan (pull-request previews, drift check): read-only. deploy (GitHub environment ENV): can
    change the environment's resources and assign only the roles the program assigns. Ends with
    the repository variables and GitHub environment the workflows expect. Exit codes: 0 done,
    1 an az command failed or the spec has errors, 2 bad input, a local state backend, or az missing.
    """
    from aksgpu.ci.oidc import github_commands, github_variables, notes, oidc_document, oidc_script, run_oidc
    from aksgpu.ci.oidc_settings import input_problems, oidc_settings
    from aksgpu.errors import UserError
    from aksgpu.workflow.az_steps import AZ_MISSING, substitute
    from aksgpu.cli.workflow.runner import command_errors
    from aksgpu.spec import SpecError

    with command_errors("ci oidc", []):
        problems = input_problems(repo, branch, subscription)
        if problems:
            raise UserError(problems=problems, source="the command line")
        try:
            settings = oidc_settings(environment, repo, branch, subscription)
        except SpecError as error:
            fail_problems(error)
        if not apply:
            if as_json:
                typer.echo(json.dumps(oidc_document(settings), indent=2))
            else:
                typer.echo(oidc_script(settings), nl=False)
            return
        if shutil.which("az") is None:
            raise UserError(AZ_MISSING)
        try:
            values = run_oidc(settings, say=say)
        except UserError as error:
            fail(error, EXIT_FAILED)
            return
        for note in notes(settings):
            say(f"note: {note}", "yellow")
        commands = [substitute([line], values)[0] for line in github_commands(settings)]
        if as_json:
            typer.echo(json.dumps({"github": {"variables": github_variables(settings, values),
                                              "environment": settings.environment, "commands": commands}}, indent=2))
            return
        say("Identities ready. Set what the workflows read (where gh is signed in to GitHub):", "bold")
        for line in commands:
            typer.echo(line)
