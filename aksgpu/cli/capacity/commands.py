"""`aksgpu verdict-history query STACK` and `aksgpu verdict-history import STACK FILE`. Only typer and the
standard library at import; the spec and the history module are imported when a command runs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from aksgpu.cli.arguments import CONTEXT_SETTINGS, StackArg
from aksgpu.cli.console import fail, fail_problems
from aksgpu.stack_config import CLUSTER_KEY

if TYPE_CHECKING:
    from aksgpu.project.stackfile import StackFile
    from aksgpu.spec import ClusterSpec
    from aksgpu.spec.fleet import FleetSpec

history_app = typer.Typer(help="The GPU gate's verdict history behind the plan's capacity section: how to export "
                               "it from Log Analytics, and importing the export.",
                          context_settings=CONTEXT_SETTINGS, no_args_is_help=True)
EXPORT = "verdicts-export.json"


def _cluster(stack: str) -> tuple[StackFile, ClusterSpec]:
    from aksgpu.errors import Problem, UserError
    from aksgpu.project.stackfile import resolve_stack
    from aksgpu.spec import SpecError, parse_cluster_spec

    try:
        stack_file = resolve_stack(stack)
        if stack_file.cluster is None:
            raise UserError(problems=[Problem(
                "STACK argument", stack, f"{stack_file.path.name} holds no cluster (a fleet's shared or upgrades "
                "stack), and verdicts are a cluster's", "pass a member's stack")])
        spec, _ = parse_cluster_spec(stack_file.cluster, source=stack_file.source(CLUSTER_KEY))
    except SpecError as error:
        fail_problems(error)
    except UserError as error:
        fail(error)
    return stack_file, spec


def _fleet(stack_file: StackFile, spec: ClusterSpec) -> FleetSpec | None:
    """The spec of the fleet whose shared workspace the member uses (logAnalytics mode "fleet"), from
    the fleet's shared stack file; None where there is none or it cannot be read (the command then
    prints a placeholder for the workspace's customer ID)."""
    from aksgpu.errors import UserError
    from aksgpu.project.stackfile import resolve_stack
    from aksgpu.spec.fleet import parse_fleet_spec
    from aksgpu.stack_config import FLEET_KEY

    if spec.monitoring.log_analytics.mode != "fleet" or spec.fleet is None:
        return None
    try:
        fleet_file = resolve_stack(spec.fleet.stack, cwd=stack_file.project_dir)
        if not isinstance(fleet_file.fleet, dict):
            return None
        fleet, _ = parse_fleet_spec(fleet_file.fleet, source=fleet_file.source(FLEET_KEY))
    except UserError:  # SpecError too
        return None
    return fleet


@history_app.command("query")
def query(
    stack: StackArg,
    days: Annotated[int, typer.Option("--days", min=1, max=730, help="How many days back to export (1-730).")] = 30,
) -> None:
    """Print how to export the gate's verdicts: the Log Analytics query and the `az` command.

    The gate logs each verdict as one line starting "aksgpu-gpu-health"; Container Insights keeps
    them in the ContainerLogV2 table. Run the printed `az monitor log-analytics query` command,
    then `aksgpu verdict-history import STACK verdicts-export.json`. Without Log Analytics, the
    printed `kubectl` command reads the newest verdicts from the record ConfigMap. Offline: this
    command only prints. Exit codes: 0 printed, 1 the spec has errors, 2 bad input.
    """
    from aksgpu.errors import UserError
    from aksgpu.preflight.verdict_history import (history_path, query_command, record_command, verdict_query,
                                                  workspace_of)

    stack_file, spec = _cluster(stack)
    try:
        kql = verdict_query(days, spec.name)
    except UserError as error:
        fail(error)
    target = history_path(stack_file.project_dir, stack_file.stack).relative_to(stack_file.project_dir)
    workspace = workspace_of(spec, _fleet(stack_file, spec))
    lines = [f"The gate's verdicts of cluster {spec.name}, last {days} days, into {target} (the plan reads it):", ""]
    if isinstance(workspace, str):
        lines += [f"  {workspace}.", ""]
    else:
        lines += ["1. Export them from Log Analytics (KQL, also for the portal's Logs page):", "",
                  *(f"     {line}" for line in kql.splitlines()), "", "   with the Azure CLI:", "",
                  f"     {query_command(days, workspace[0], workspace[1], spec.name, EXPORT)}", ""]
    lines += ["   Or, from the cluster itself (its newest verdicts only):", "",
              f"     {record_command('verdicts-record.jsonl')}", "",
              "2. Merge the export into the snapshot, then commit it:", "",
              f"     aksgpu verdict-history import {stack_file.stack} "
              f"{'verdicts-record.jsonl' if isinstance(workspace, str) else EXPORT}"]
    typer.echo("\n".join(lines))


@history_app.command("import")
def import_(
    stack: StackArg,
    export: Annotated[Path, typer.Argument(metavar="FILE", help="The export: the JSON `az monitor log-analytics "
                                           "query` wrote, the record ConfigMap's `verdicts` text, or log lines.")],
) -> None:
    """Merge an export of the gate's verdicts into the stack's snapshot, stacks/verdicts/STACK.jsonl.

    Every entry already there stays; new ones are added once, oldest first, and the file is
    replaced whole or not at all (under the project's lock). A snapshot with a line that is not a
    verdict entry is left as it is and the import refused. Exit codes: 0 merged, 1 the spec has
    errors, 2 bad input (stack, FILE, a broken snapshot).
    """
    from aksgpu.errors import Problem, UserError
    from aksgpu.preflight.verdict_history import import_export
    from aksgpu.project.files import read_text_if_exists

    stack_file, _ = _cluster(stack)
    try:
        text = read_text_if_exists(export)
        if text is None:
            raise UserError(problems=[Problem(
                "FILE argument", str(export), "is not a file",
                f"pass the file the export wrote (`aksgpu verdict-history query {stack_file.stack}` prints the "
                "commands)")])
        done = import_export(stack_file.project_dir, stack_file.stack, text, str(export))
    except UserError as error:
        fail(error)
    skipped = f"; {len(done.skipped)} line(s) held no verdict entry and were skipped" if done.skipped else ""
    where = done.path.relative_to(stack_file.project_dir)
    typer.echo(f"{where}: {done.added} new verdict entries, {done.total} in all{skipped}." if done.added else
               f"{where}: nothing new ({done.total} entries){skipped}; the file is unchanged.")


def register(app: typer.Typer) -> None:
    """Adds the `verdict-history` group to the aksgpu app."""
    app.add_typer(history_app, name="verdict-history")
