"""The commands on stacks/environments.yaml and what is made from it: validate, render, init, (new in new.py),
diff, schema, and `presets list|show`. Only typer and the standard library at import; the spec,
YAML, jinja2 and rich are imported when a command runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from aksgpu.cli.arguments import (
    CONTEXT_SETTINGS,
    EnvironmentArg,
    EnvironmentsArg,
    PresetArg,
    PresetOption,
)
from aksgpu.cli.console import (echo_json, fail, fail_input, fail_problems, progress, show_problems, show_value,
                                table_width)
from aksgpu.errors import UserError
from aksgpu.stack_config import CLUSTER_KEY

if TYPE_CHECKING:
    from aksgpu.environments.file import EnvironmentsFile

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]


def _environments() -> EnvironmentsFile:
    from aksgpu.environments.file import load_environments

    try:
        return load_environments()
    except UserError as error:
        fail(error)


def validate(
    targets: Annotated[
        list[str] | None,
        typer.Argument(help="Environments or stack files (default: every environment and every stack file).",
                       show_default=False),
    ] = None,
    as_json: JsonOption = False,
    spec_only: Annotated[bool, typer.Option(
        "--spec-only", help="Check the spec rules only, without planning each target for the security policies "
                            "(fast: for editors and pre-commit hooks).")] = False,
) -> None:
    """Check environments and stack files against every spec rule and aksgpu's security policies,
    and print all problems at once.

    An environment is checked as environments.yaml defines it (preset + overrides) and as its
    rendered stack file says; a stack file out of date with environments.yaml is a warning. Each
    valid target is then planned offline and checked by the security policies (`aksgpu policy
    list`) with its waivers, unless --spec-only.
    Exit codes: 0 valid (warnings may be printed), 1 errors or failing policy findings, 2 bad input
    (a target that cannot be read).
    """
    from aksgpu.environments.validation import validate_targets

    if not spec_only and len(targets or [None, None]) > 1:
        from aksgpu.plan.workers import warm_up

        warm_up(len(list(Path("stacks").glob("Pulumi.*.yaml"))))  # its server imports the planner meanwhile
    try:
        reports = validate_targets(targets or [])
        if not spec_only:
            from aksgpu.plan.review import Stacks, check_policies

            stacks = Stacks()  # a fleet's shared stack is planned once for all its members
            with progress("Planning each target offline for the security policies") as update:
                stacks.plan_ahead([report.planned[0] for report in reports
                                   if report.planned is not None and not report.errors], progress=update)
            for report in reports:
                check_policies(report, stacks)
    except Exception as error:  # UserError: one clear message

        if isinstance(error, UserError):
            fail(error)
        raise
    if as_json:
        echo_json([report.as_json() for report in reports])
    else:
        for report in reports:
            typer.echo(report.text())
    if any(report.failed for report in reports):
        raise typer.Exit(2)  # a target could not be read: bad input, as in every other command
    if any(report.errors for report in reports):
        raise typer.Exit(1)


def render(
    environments: EnvironmentsArg = None,
    check: Annotated[bool, typer.Option("--check", help="Write nothing; exit 1 and show a diff when a stack "
                                                         "file is out of date (for CI).")] = False,
    force: Annotated[bool, typer.Option("--force", help="Overwrite stack files edited by hand "
                                                         "(each is kept as a .bak file beside it).")] = False,
    allow_replace: Annotated[bool, typer.Option("--allow-replace", help="Write stack files that change fields "
                                                "Azure cannot change in place (the next up replaces them).")] = False,
) -> None:
    """Render stacks/Pulumi.<env>.yaml from stacks/environments.yaml through templates/.

    Each file holds the full, effective config: the preset, then defaults.overrides, then the
    environment's overrides, every field resolved. Same input, same bytes. A stack file edited
    by hand is never overwritten unless --force. An environment with errors is named and skipped;
    the others are still written. Exit codes: 0 written or current, 1 --check found a file out of
    date or an environment has spec errors, 2 bad input, a hand-edited file, or a change that
    would replace the cluster or a pool (shown with the override that keeps today's value;
    --allow-replace writes it).
    """
    if check and force:
        fail_input("--force", True, "--check writes nothing and --force overwrites: they do not go together",
                   "drop one of them")
    if check:
        _render(environments, check=True, force=False, allow_replace=False)
        return
    # A writer holds the project's lock from reading environments.yaml to its last write, as init does.
    from aksgpu.project.files import locked_for_writing
    from aksgpu.project.stackfile import find_project_dir

    try:
        project_dir = find_project_dir(Path.cwd())
    except UserError as error:
        fail(error)
    with locked_for_writing(project_dir):
        _render(environments, check=False, force=force, allow_replace=allow_replace)


def _render(environments: list[str] | None, *, check: bool, force: bool, allow_replace: bool) -> None:
    from aksgpu.cli.environments.render_output import render_check, system_pool_notes
    from aksgpu.environments.render import plan_renders, write_rendered
    from aksgpu.spec import SpecError

    env_file = _environments()
    if not env_file.exists:
        fail(f"{env_file.relative_path} does not exist. Fix: create it with `aksgpu init ENV --preset NAME`.")
    if not env_file.names:
        fail(f"{env_file.relative_path} defines no environments, so there is nothing to render. "
              "Fix: add one under environments: (or with `aksgpu init ENV --preset NAME`).")
    names = environments or env_file.names
    try:
        env_file.require(names)
    except UserError as error:
        fail(error)
    rendered_stacks = []
    failed: list[str] = []
    bad_input = False
    for name in names:
        try:
            rendered_stacks.extend(plan_renders(env_file, name))
        except SpecError as error:
            show_problems(error)
            failed.append(name)
        except UserError as error:
            typer.echo(f"error: environment {name}: {error}", err=True)
            failed.append(name)
            bad_input = True
    project = env_file.project_dir
    if check:
        render_check(rendered_stacks, project, failed)
        return
    for rendered in rendered_stacks:
        relative = rendered.path.relative_to(project)
        try:
            backup = write_rendered(rendered, force=force, allow_replace=allow_replace)
        except UserError as error:
            typer.echo(f"error: {error}", err=True)
            failed.append(rendered.environment)
            bad_input = True
            continue
        verb = {"new": "created", "stale": "updated", "current": "unchanged", "hand-edited": "overwritten"}
        typer.echo(f"{relative}: {verb[rendered.state]}")
        if backup is not None:
            typer.echo(f"  the hand-edited file was kept as {backup.relative_to(project)}")
        system_pool_notes(rendered)
    if failed:
        typer.echo(f"not rendered: {', '.join(failed)} (see above); every other environment was.", err=True)
        raise typer.Exit(2 if bad_input else 1)



def init(
    environment: Annotated[str, typer.Argument(help="The new environment's name (also its Pulumi stack).")],
    preset: PresetOption,
    location: Annotated[str | None, typer.Option(metavar="REGION", help="Azure region, e.g. eastus2.")] = None,
    name: Annotated[str | None, typer.Option(metavar="NAME", help="Cluster name (default: gpu-ENV).")] = None,
    resource_group: Annotated[str | None, typer.Option(
        metavar="NAME", help="Resource group (default: rg-NAME).")] = None,
    admin_group: Annotated[list[str] | None, typer.Option(
        "--admin-group", metavar="OBJECT_ID",
        help="Object ID of an Entra ID group that administers the cluster (repeatable).")] = None,
    description: Annotated[str | None, typer.Option(metavar="TEXT", help="What the environment is for.")] = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", metavar="PATH=VALUE", help="Override a spec field: PATH=VALUE, e.g. controlPlane.tier=Premium or "
                      "nodePools.a100.maxCount=8 (repeatable; values are YAML).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite a hand-edited stack file of the same name "
                                                         "(kept as a .bak file).")] = False,
) -> None:
    """Add an environment to stacks/environments.yaml (creating it if needed) and render its stack.

    Nothing is written unless the new environment's spec is valid.
    """
    from aksgpu.environments.initialize import InitRequest, add_environment
    from aksgpu.spec import SpecError

    request = InitRequest(environment=environment, preset=preset, location=location, name=name,
                          resource_group=resource_group, admin_groups=admin_group or [], description=description,
                          assignments=set_ or [], force=force)
    try:
        outcome = add_environment(request)
    except SpecError as error:
        show_problems(error)
        typer.echo("Nothing was written.", err=True)
        raise typer.Exit(1) from None
    except UserError as error:
        fail(error)
    for line in outcome.messages:
        typer.echo(line)


def diff(
    environment_a: EnvironmentArg,
    environment_b: EnvironmentArg,
    as_json: JsonOption = False,
) -> None:
    """Show how two environments' effective specs differ, field by field.

    Pools and other keyed list items are matched by name; then the monthly cost of each at
    typical and max scale and the difference (`aksgpu cost`). Exit codes: 0 (whether or not
    they differ), 1 a spec has errors, 2 bad input.
    """
    from aksgpu.environments.fields import field_differences, field_rows
    from aksgpu.environments.effective import spec_config
    from aksgpu.environments.render import effective_environment
    from aksgpu.spec import SpecError

    env_file = _environments()
    rows, specs = {}, {}
    for env in (environment_a, environment_b):
        try:
            effective = effective_environment(env_file, env)
        except SpecError as error:
            fail_problems(error)
        except UserError as error:
            fail(error)
        rows[env] = {row.path: row.value for row in field_rows(spec_config(effective.spec))}
        specs[env] = effective.spec
    differences = field_differences(rows[environment_a], rows[environment_b], environment_a, environment_b)
    cost = _cost_difference(env_file.project_dir, specs, environment_a, environment_b)
    if as_json:
        echo_json({"a": environment_a, "b": environment_b, "differences": differences, "cost": cost})
        return
    if not differences:
        typer.echo(f"{environment_a} and {environment_b} have the same effective spec.")
        return
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"{len(differences)} fields differ", box=None, title_justify="left")
    for header in ("field", environment_a, environment_b):
        table.add_column(header, overflow="fold")  # never "…": a path cut short names no field
    lines = [(row["path"], show_value(row[environment_a]), show_value(row[environment_b])) for row in differences]
    for cells in lines:
        table.add_row(*(Text(text) for text in cells))
    width = table_width()
    if width is not None:  # not a terminal: as wide as the longest row, so each path stays whole on its line
        width = max(width, sum(max(len(cells[column]) for cells in lines) + 2 for column in range(3)))
    Console(width=width).print(table)
    from aksgpu.preflight.cost_report import difference_lines

    typer.echo("\n".join(["", *difference_lines(cost, environment_a, environment_b)]))


def _cost_difference(project_dir: Path, specs: dict[str, Any], name_a: str, name_b: str) -> dict[str, Any]:
    """Monthly cost of both environments at typical and max scale, and B - A (`aksgpu cost`)."""
    from aksgpu.preflight.tables import price_table
    from aksgpu.preflight.cost import estimate
    from aksgpu.preflight.cost_report import difference

    try:
        prices = price_table(project_dir)
    except UserError as error:
        fail(error)
    return difference(estimate(specs[name_a], prices), estimate(specs[name_b], prices), name_a, name_b)


def schema(
    kind: Annotated[str, typer.Argument(help=f"cluster (the {CLUSTER_KEY} value of a stack file) or environments "
                                             "(stacks/environments.yaml).")] = "cluster",
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="Write to this file instead of printing (- prints); an existing file is "
                               "replaced only if it is a JSON Schema.")] = None,
) -> None:
    """Print the JSON Schema of the cluster spec or of environments.yaml, for editors and CI.

    stacks/environments.yaml starts with a yaml-language-server comment that points editors at
    stacks/environments.schema.json (`aksgpu schema environments -o stacks/environments.schema.json`).
    """
    from aksgpu.environments.schema import cluster_schema, environments_schema

    builders = {"cluster": cluster_schema, "environments": environments_schema}
    if kind not in builders:
        fail_input("KIND argument", kind, "no schema of that name", f"use one of: {', '.join(builders)}")
    text = json.dumps(builders[kind](), indent=2) + "\n"
    if output is None or str(output) == "-":
        typer.echo(text, nl=False)
        return
    from aksgpu.project.files import read_text_if_exists, write_text_atomically

    try:
        existing = read_text_if_exists(output)
        if existing is not None and not _is_json_schema(existing):
            fail(f"{output} exists and is not a JSON Schema, so writing the schema there would lose it. "
                  "Fix: name another file, or move that one away.")
        write_text_atomically(output, text)
    except UserError as error:
        fail(error)
    typer.echo(f"wrote {output}")


def _is_json_schema(text: str) -> bool:
    """Whether `text` is a JSON Schema document (one `aksgpu schema -o` may replace)."""
    try:
        document = json.loads(text)
    except ValueError:
        return False
    return isinstance(document, dict) and "$schema" in document


def presets_list(as_json: JsonOption = False) -> None:
    """List the presets with what each is for."""
    from aksgpu.environments.presets import all_presets

    presets = all_presets()
    if as_json:
        echo_json([{"name": p.name, "description": p.description} for p in presets])
        return
    width = max(len(p.name) for p in presets)
    for preset in presets:
        typer.echo(f"{preset.name.ljust(width)}  {preset.description}")


def presets_show(
    name: PresetArg,
    as_json: JsonOption = False,
) -> None:
    """Show a preset's effective spec: every field, its value, where it comes from and what it does.

    `preset` marks the values the preset sets; `default` the spec's defaults; `init` the values
    `aksgpu init` fills in (name, location, resource group).
    """
    from aksgpu.environments.presets_view import preset_rows

    try:
        rows = preset_rows(name)
    except UserError as error:
        fail(error)
    if as_json:
        echo_json([{"path": r.path, "value": r.value, "source": r.source, "description": r.description}
                   for r in rows])
        return
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table("field", "value", "from", "what it does", box=None, show_lines=False)
    for row in rows:
        table.add_row(*(Text(text) for text in (row.path, show_value(row.value), row.source, row.description)))
    Console(width=table_width()).print(table)


def register(app: typer.Typer) -> None:
    """Adds these commands (and `new`, from new.py) and the `presets` group to the aksgpu app."""
    from aksgpu.cli.environments.new import new

    app.command()(validate)
    app.command()(render)
    app.command()(init)
    app.command()(new)
    app.command()(diff)
    app.command()(schema)
    presets_app = typer.Typer(help="The presets environments start from.", no_args_is_help=True,
                              context_settings=CONTEXT_SETTINGS)
    presets_app.command("list")(presets_list)
    presets_app.command("show")(presets_show)
    app.add_typer(presets_app, name="presets")
