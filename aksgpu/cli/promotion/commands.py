"""`aksgpu promote ENV`: decide from the canary's gate verdicts and move the pins in
environments.yaml. Only typer and the standard library at import; aksgpu.promotion, the
environments and the spec are imported when the command runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from aksgpu.cli.arguments import EnvironmentArg
from aksgpu.cli.console import echo_json, fail, fail_problems, say


def promote(
    env: EnvironmentArg,
    verdicts: Annotated[Path | None, typer.Option(
        "--verdicts", metavar="FILE",
        help="Read the verdicts from FILE (JSON lines of record entries or gate log lines, or the record "
             "ConfigMap as JSON) instead of the cluster.")] = None,
    api_server: Annotated[str | None, typer.Option(
        "--api-server", metavar="URL",
        help="Read the verdicts from this API server without signing in, as `kubectl proxy` serves it "
             "(http://127.0.0.1:8001). Default: `kubectl get --raw` with the current kubeconfig.")] = None,
    context: Annotated[str | None, typer.Option(
        "--context", help="The kubeconfig context kubectl uses (default: the current one).")] = None,
    log_analytics: Annotated[str | None, typer.Option(
        "--log-analytics", metavar="WORKSPACE_ID",
        help="Read the verdicts from this Log Analytics workspace (its workspace ID) instead, with the Azure "
             "CLI's sign-in: for a fleet, whose members log there.")] = None,
    days: Annotated[int, typer.Option("--days", min=1, max=90, help="With --log-analytics: how many days "
                                                                     "of verdicts to read.")] = 7,
    fleet_id: Annotated[str | None, typer.Option(
        "--fleet-id", metavar="ID", help="With --update-run: the fleet's resource ID "
                                         "(az fleet show -g GROUP -n NAME --query id).")] = None,
    update_run: Annotated[str | None, typer.Option(
        "--update-run", metavar="RUN",
        help="The Fleet Manager update run whose approval after ENVIRONMENT's update group to answer "
             "(ENVIRONMENT: the canary member's stack; approved only on promote, with minCanaryNodes passed).")] = None,
    roll_back_canary: Annotated[bool, typer.Option(
        "--roll-back-canary",
        help="On a roll back decision, also run AKS's node pool version rollback on the canary's AgentPools "
             "(`az aks nodepool rollback`, Azure CLI 2.88.0 or later; within 7 days of the upgrade).")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the decision and what would change; "
                                                            "write nothing.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the decision as JSON.")] = False,
) -> None:
    """Decide from the canary pool's gate verdicts: promote its stack to the other GPU pools, wait, refuse or roll back.

    Exit codes: 0 promote or wait (the JSON says which); 1 refuse or roll back; 2 bad input.
    """
    from aksgpu.environments.file import load_environments
    from aksgpu.environments.render import plan_render
    from aksgpu.errors import EXIT_FAILED, MISSING, Problem, UserError
    from aksgpu.promotion import cluster, fleet, promote as domain, records, report
    from aksgpu.spec import SpecError

    try:
        if (fleet_id is None) != (update_run is None):
            given, missing = ("--fleet-id", "--update-run") if update_run is None else ("--update-run", "--fleet-id")
            raise UserError(problems=[Problem(missing, MISSING, f"{given} and {missing} go together",
                                              f"give {missing} as well, or neither")])
        environments = load_environments()
        rendered = plan_render(environments, env)
        spec = rendered.spec
        assert spec is not None  # a rendered environment is validated
        domain.rules_of(spec)
        event_only: list[str] = []
        if verdicts is not None:
            found = records.read_file(verdicts)
        elif log_analytics is not None:
            found = fleet.log_analytics_verdicts(fleet.https_send(), log_analytics, days, spec.name)
        else:
            get = cluster.http_get(api_server) if api_server else cluster.kubectl_get(context)
            read = cluster.read(get)
            found, event_only = read.records, read.event_only_nodes
        decision = domain.decide_for(spec, found)
        gate_note = ""
        if update_run is not None and fleet_id is not None:
            group = domain.fleet_group(environments, env)
            approved, why = fleet.answer_after_gate(fleet.https_send(), fleet_id, update_run, group, decision,
                                                    domain.rules_of(spec), dry_run)
            gate_note = (f"{'would approve' if dry_run else 'approved'} {len(approved)} gate(s) after group "
                         f"{group} of {update_run}: {why}") if approved else f"no gate approved: {why}"
        changes, notes = domain.changes_for(env, spec, decision, domain.overrides_path(environments, env))
        if update_run is not None:
            notes = [gate_note, *notes]
            changes = []  # a fleet's members move with the update run, not through pins
        written = False
        if changes and not dry_run:
            domain.apply(env, changes, environments.project_dir,
                         validate=lambda candidate: plan_render(candidate, env))
            written = True
        if roll_back_canary and decision.action == "rollback" and not dry_run:
            # After the pins were written: a refused rollback is reported beside them, not instead.
            try:
                notes = [*notes, *(f"ran `{command}`" for command in domain.roll_back_canary(spec))]
            except UserError as error:
                notes = [*notes, f"the canary's rollback did not run: {error}"]
    except SpecError as error:
        fail_problems(error)
    except UserError as error:
        fail(error)
    if as_json:
        echo_json(report.document(env, decision, changes, notes, dry_run=dry_run, written=written,
                                  event_only=event_only))
    else:
        typer.echo(report.text(env, decision, changes, notes, dry_run=dry_run, written=written,
                               event_only=event_only))
    if written:
        say(f"{environments.relative_path}: pins moved ({len(changes)} values)")
    if decision.action in ("refuse", "rollback"):
        raise typer.Exit(EXIT_FAILED)


def register(app: typer.Typer) -> None:
    """Adds `promote` to the aksgpu app."""
    app.command()(promote)
