"""`aksgpu plan STACK`: every resource `pulumi up` would create, offline. Only typer and the
standard library at import; the planner, the spec and Pulumi are imported when the command runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from aksgpu.cli.arguments import StackArg
from aksgpu.cli.console import fail, fail_input, fail_problems, progress, say
from aksgpu.stack_config import CLUSTER_KEY, FLEET_UPGRADES_KEY

if TYPE_CHECKING:
    from aksgpu.project.stackfile import StackFile
    from aksgpu.spec import ClusterSpec, Issue
    from aksgpu.preflight.cost import CostEstimate
    from aksgpu.plan.review import Review


def _resolve(stack: str) -> StackFile:
    from aksgpu.errors import UserError
    from aksgpu.project.stackfile import resolve_stack

    try:
        return resolve_stack(stack)
    except UserError as error:
        fail(error)


def _load(stack_file: StackFile) -> tuple[StackFile, ClusterSpec, list[Issue]]:
    """The stack file, its spec and the spec's warnings; exits 1 on spec errors."""
    from aksgpu.spec import SpecError, parse_cluster_spec

    try:
        spec, warnings = parse_cluster_spec(stack_file.cluster, source=stack_file.source(CLUSTER_KEY))
    except SpecError as error:
        fail_problems(error)
    return stack_file, spec, warnings


def _stale_note(stack_file: StackFile) -> str | None:
    """A note when the stack file is not what environments.yaml renders (None: current or unknown);
    exits when environments.yaml cannot render the stack's environment (it may be out of date)."""
    from aksgpu.environments.render import EnvironmentNotRendered, render_state

    try:
        rendered = render_state(stack_file)
    except EnvironmentNotRendered as error:
        fail(error)
    if rendered is None or rendered.state == "current":
        return None
    why = rendered.reason or "it is out of date with stacks/environments.yaml"
    return f"note: {stack_file.path.name} is not what `aksgpu render {stack_file.stack}` would write: {why}."


def _cost(found: Review) -> CostEstimate:
    """The cost estimate the plan shows (`aksgpu cost`); exits 2 on a broken project price table."""
    from aksgpu.errors import UserError

    try:
        cost = found.cost
    except UserError as error:
        fail(error)
    assert cost is not None  # a cluster's review has a cost
    return cost


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
    stack_file = _resolve(stack)
    if stack_file.is_fleet:
        _plan_fleet(stack_file, as_json, manifests)
        return
    if stack_file.is_fleet_upgrades:
        _plan_fleet_upgrades(stack_file, as_json)
        return
    stack_file, spec, warnings = _load(stack_file)
    note = _stale_note(stack_file)

    from aksgpu.errors import UserError
    from aksgpu.plan.policy_results import policy_lines
    from aksgpu.plan.preflight_report import preflight_document, preflight_lines
    from aksgpu.plan.report import plan_document, render_text
    from aksgpu.plan.review import Stacks, review

    with progress("Planning offline: running the Pulumi program under the mock engine"):
        try:
            result = Stacks().plan(stack_file)  # a fleet member's plan reads its fleet stack's planned outputs
        except UserError as error:
            fail(error)
    reviewed = review(result, spec, project_dir=stack_file.project_dir)
    policy = reviewed.policy
    found = _cost(reviewed)
    if manifests is not None:
        from aksgpu.plan.manifests import write_manifests

        try:
            written = write_manifests(result, manifests)
        except UserError as error:
            fail(error)
        say(f"wrote {len(written)} manifests to {manifests}")
    where = (stack_file.project_dir, stack_file.stack)  # the capacity section reads the stack's verdict history
    try:
        preflight = preflight_document(spec, *where) if as_json else preflight_lines(spec, *where)
    except UserError as error:
        fail(error)
    if as_json:
        document = {**plan_document(result, warnings, reviewed.deploy_time), "preflight": preflight,
                    "cost": found.json(), "policy": policy.document()}
        typer.echo(json.dumps(document, indent=2, sort_keys=False, default=str))
    else:
        from aksgpu.preflight.cost_report import text_lines

        typer.echo(render_text(result, warnings, reviewed.deploy_time))
        typer.echo("\n".join([*preflight, "", *text_lines(found), "", *policy_lines(policy)]))
        if note:
            typer.echo(note, err=True)
    if policy.failed:
        typer.echo(f"error: {len(policy.problems())} security policy finding(s) fail this plan (see above); fix them "
                   "or waive each under policy.waivers with a reason.", err=True)
        raise typer.Exit(1)


def _plan_fleet(stack_file: StackFile, as_json: bool, manifests: Path | None) -> None:
    """`aksgpu plan FLEET`: the shared stack and every member, then the fleet's own section."""
    from aksgpu.errors import UserError
    from aksgpu.plan.fleet import fleet_capacity, fleet_capacity_lines, fleet_facts, fleet_lines, plan_fleet
    from aksgpu.plan.policy_results import policy_lines
    from aksgpu.plan.report import plan_document, render_text
    from aksgpu.spec import SpecError

    if manifests is not None:
        fail_input("--manifests", str(manifests), f"{stack_file.path.name} is a fleet's shared stack, which declares "
                   "no Kubernetes objects", "pass --manifests with a member's stack (`aksgpu plan STACK-MEMBER "
                   "--manifests DIR`)")
    from aksgpu.plan.workers import warm_up

    members = stack_file.fleet.get("members") if isinstance(stack_file.fleet, dict) else None
    warm_up(2 + len(members) if isinstance(members, list) else 0)  # its server imports the planner meanwhile
    note = _stale_note(stack_file)
    try:
        with progress("Planning the fleet offline: its shared stack, then each member") as update:
            fleet = plan_fleet(stack_file, progress=update)
        capacity = fleet_capacity(fleet)  # each member's, from its verdict history, as `aksgpu plan STACK`
    except SpecError as error:
        fail_problems(error)
    except UserError as error:
        fail(error)
    facts = fleet_facts(fleet)
    if as_json:
        document = {**plan_document(fleet.shared, fleet.warnings, fleet.review.deploy_time),
                    "policy": fleet.policy.document(), "fleet": facts,
                    "members": {m.stack_file.stack: {**plan_document(m.plan, m.warnings, m.review.deploy_time),
                                                     "cost": m.cost.json(), "policy": m.policy.document(),
                                                     "capacity": capacity[m.stack_file.stack].document()}
                                for m in fleet.members},
                    "upgrades": plan_document(fleet.upgrades, [], fleet.upgrades_review.deploy_time)}
        typer.echo(json.dumps(document, indent=2, sort_keys=False, default=str))
    else:
        typer.echo(render_text(fleet.shared, fleet.warnings, fleet.review.deploy_time))
        typer.echo("\n".join(["", *fleet_lines(facts), *fleet_capacity_lines(capacity), "",
                               *policy_lines(fleet.policy)]))
        for member in fleet.members:
            if member.policy.failed:
                typer.echo("\n".join([f"{member.stack_file.stack}:", *policy_lines(member.policy)]))
        typer.echo("\nEach member's full plan: `aksgpu plan STACK` with a member stack above.")
        if note:
            typer.echo(note, err=True)
    if fleet.failed:
        typer.echo("error: security policy findings fail this fleet's plan (see above); fix them or waive each "
                   "under policy.waivers with a reason.", err=True)
        raise typer.Exit(1)


def _plan_fleet_upgrades(stack_file: StackFile, as_json: bool) -> None:
    """`aksgpu plan FLEET-upgrades`: the update strategy and auto-upgrade profiles, after the fleet's plan."""
    from aksgpu.errors import UserError
    from aksgpu.plan.planner import plan_stack
    from aksgpu.plan.report import plan_document, render_text
    from aksgpu.spec import SpecError
    from aksgpu.spec.fleet import parse_fleet_upgrades_spec

    try:
        _, warnings = parse_fleet_upgrades_spec(stack_file.fleet_upgrades,
                                                source=stack_file.source(FLEET_UPGRADES_KEY))
        with progress("Planning offline: the fleet's shared stack, then its upgrades stack"):
            result = plan_stack(stack_file)
    except SpecError as error:
        fail_problems(error)
    except UserError as error:
        fail(error)
    note = _stale_note(stack_file)
    typer.echo(json.dumps(plan_document(result, warnings), indent=2, default=str) if as_json
               else render_text(result, warnings))
    if note and not as_json:
        typer.echo(note, err=True)


def register(app: typer.Typer) -> None:
    """Adds `plan` to the aksgpu app."""
    app.command()(plan)
