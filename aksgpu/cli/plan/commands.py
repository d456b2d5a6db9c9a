"""`aksgpu plan STACK`: every resource `pulumi up` would create, offline. Only typer and the
standard library at import; the planner, the spec and Pulumi are imported when the command runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from aksgpu.cli.arguments import StackArg
from aksgpu.cli.console import fail, progress

if TYPE_CHECKING:
    from aksgpu.cli.project.stackfile import StackFile
    from aksgpu.components.spec import ClusterSpec, Issue
    from aksgpu.preflight.cost import CostEstimate


def _load(stack: str) -> tuple[StackFile, ClusterSpec, list[Issue]]:
    """The stack file, its spec and the spec's warnings; exits 2 on bad input and 1 on spec errors."""
    from aksgpu.cli.errors import UserError
    from aksgpu.cli.project.stackfile import resolve_stack
    from aksgpu.components.spec import SpecError, parse_cluster_spec

    try:
        stack_file = resolve_stack(stack)
    except UserError as error:
        fail(str(error))
    try:
        spec, warnings = parse_cluster_spec(stack_file.cluster, source=f"aksgpu:cluster in {stack_file.path.name}")
    except SpecError as error:
        typer.echo(str(error), err=True)
        raise typer.Exit(1) from None
    return stack_file, spec, warnings


def _stale_note(stack_file: StackFile) -> str | None:
    """A note when the stack file is not what environments.yaml renders (None: current or unknown);
    exits when environments.yaml cannot render the stack's environment (it may be out of date)."""
    from aksgpu.cli.environments.render import EnvironmentNotRendered, render_state

    try:
        rendered = render_state(stack_file)
    except EnvironmentNotRendered as error:
        fail(str(error), error.exit_code)
    if rendered is None or rendered.state == "current":
        return None
    why = rendered.reason or "it is out of date with stacks/environments.yaml"
    return f"note: {stack_file.path.name} is not what `aksgpu render {stack_file.stack}` would write: {why}."


def _cost(spec: ClusterSpec, stack_file: StackFile) -> CostEstimate:
    """The cost estimate the plan shows (`aksgpu cost`); exits 2 on a broken project price table."""
    from aksgpu.cli.errors import UserError
    from aksgpu.cli.preflight.tables import cost_of

    try:
        return cost_of(spec, stack_file.project_dir)
    except UserError as error:
        fail(str(error))


def plan(
    stack: StackArg,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan document (JSON) instead of text.")] = False,
    manifests: Annotated[Path | None, typer.Option(
        "--manifests", metavar="DIR",
        help="Also write every Kubernetes object (and Helm release) of the plan as YAML into DIR: "
             "a new or empty folder, or one an earlier --manifests run wrote.")] = None,
) -> None:
    """Show every resource `pulumi up` would create for a stack, offline.

    Runs the real Pulumi program under Pulumi's mock runtime: no Azure account, no Pulumi CLI,
    no network; then aksgpu's security policies over what it declares (`aksgpu policy list`),
    and the cost estimate of `aksgpu cost`.
    Exit codes: 0 planned, 1 the spec has errors or a mandatory policy finding is not waived
    (the plan is still printed), 2 bad input (stack, YAML, DIR).
    """
    stack_file, spec, warnings = _load(stack)
    note = _stale_note(stack_file)

    from aksgpu.cli.plan.planner import plan_stack
    from aksgpu.cli.plan.policy_results import evaluate_plan, policy_lines
    from aksgpu.cli.plan.preflight_report import preflight_document, preflight_lines
    from aksgpu.cli.plan.report import plan_document, render_text

    with progress("Planning offline: running the Pulumi program under the mock engine"):
        result = plan_stack(stack_file)
    policy = evaluate_plan(result, spec)
    found = _cost(spec, stack_file)
    if manifests is not None:
        from aksgpu.cli.errors import UserError
        from aksgpu.cli.plan.manifests import write_manifests

        try:
            written = write_manifests(result, manifests)
        except UserError as error:
            fail(str(error))
        typer.echo(f"wrote {len(written)} manifests to {manifests}", err=True)
    if as_json:
        document = {**plan_document(result, warnings), "preflight": preflight_document(spec),
                    "cost": found.json(), "policy": policy.document()}
        typer.echo(json.dumps(document, indent=2, sort_keys=False, default=str))
    else:
        from aksgpu.preflight.cost_report import text_lines

        typer.echo(render_text(result, warnings))
        typer.echo("\n".join([*preflight_lines(spec), "", *text_lines(found), "", *policy_lines(policy)]))
        if note:
            typer.echo(note, err=True)
    if policy.failed:
        typer.echo(f"error: {len(policy.problems())} security policy finding(s) fail this plan (see above); fix them "
                   "or waive each under policy.waivers with a reason.", err=True)
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Adds `plan` to the aksgpu app."""
    app.command()(plan)
