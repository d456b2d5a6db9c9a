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
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the decision and what would change; "
                                                            "write nothing.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the decision as JSON.")] = False,
) -> None:
    """Decide from the canary pool's gate verdicts: promote its stack to the other GPU pools, wait, refuse or roll back.

    Exit codes: 0 promote or wait (the JSON says which); 1 refuse or roll back; 2 bad input.
    """
    from aksgpu.environments.file import load_environments
    from aksgpu.environments.render import plan_render
    from aksgpu.errors import EXIT_FAILED, UserError
    from aksgpu.promotion import cluster, promote as domain, records, report
    from aksgpu.spec import SpecError

    try:
        environments = load_environments()
        rendered = plan_render(environments, env)
        spec = rendered.spec
        assert spec is not None  # a rendered environment is validated
        domain.rules_of(spec)
        if verdicts is not None:
            found, event_only = records.read_file(verdicts), []
        else:
            get = cluster.http_get(api_server) if api_server else cluster.kubectl_get(context)
            read = cluster.read(get)
            found, event_only = read.records, read.event_only_nodes
        decision = domain.decide_for(spec, found)
        changes, notes = domain.changes_for(env, spec, decision)
        written = False
        if changes and not dry_run:
            domain.apply(env, changes, environments.project_dir,
                         validate=lambda candidate: plan_render(candidate, env))
            written = True
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
