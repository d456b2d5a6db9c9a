"""`aksgpu cost STACK` and `aksgpu prices refresh`. Only typer and the standard library at import;
the spec, the estimate and the price client are imported when a command runs."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from aksgpu.cli.arguments import CONTEXT_SETTINGS, StackArg
from aksgpu.cli.console import echo_json, fail, fail_input, fail_problems
from aksgpu.errors import EXIT_FAILED
from aksgpu.stack_config import CLUSTER_KEY, FLEET_KEY

if TYPE_CHECKING:
    from aksgpu.project.stackfile import StackFile

prices_app = typer.Typer(help="The price table behind cost estimates: its date, and a fresh one from Azure.",
                         context_settings=CONTEXT_SETTINGS, no_args_is_help=True)


def cost(
    stack: StackArg,
    as_json: Annotated[bool, typer.Option("--json", help="Print the estimate as JSON.")] = False,
) -> None:
    """Estimate what a stack's cluster costs per hour and per month, offline.

    Each node pool at its fewest, typical and most nodes (spot pools at the spot price), plus the
    fixed parts: control-plane tier, registry, workspace ingestion, NAT gateway, public IPs,
    private endpoints, HSM keys. A fleet's stack: its shared parts, each member, and the total.
    Prices come from the dated table shipped with aksgpu, or the
    project's stacks/prices.yaml (`aksgpu prices refresh`); a price the table lacks is listed
    and not counted. Exit codes: 0 estimated (missing prices are listed), 1 the spec has errors,
    2 bad input (stack, YAML, price table).
    """
    from aksgpu.errors import UserError
    from aksgpu.preflight.tables import cost_of
    from aksgpu.project.stackfile import resolve_stack
    from aksgpu.spec import SpecError, parse_cluster_spec
    from aksgpu.preflight.cost_report import text_lines

    try:
        stack_file = resolve_stack(stack)
        if stack_file.is_fleet:
            _fleet_cost(stack_file, as_json)
            return
        if stack_file.is_fleet_upgrades:
            fail_input("STACK argument", stack, f"{stack_file.path.name} is a fleet's upgrades stack: an update "
                       "strategy and auto-upgrade profiles, which Fleet Manager does not charge for",
                       "`aksgpu cost FLEET` gives the fleet's cost")
        spec, _ = parse_cluster_spec(stack_file.cluster, source=stack_file.source(CLUSTER_KEY))
        found = cost_of(spec, stack_file.project_dir)
    except SpecError as error:
        fail_problems(error)
    except UserError as error:
        fail(error)
    if as_json:
        echo_json({"stack": stack_file.stack, "stackFile": str(stack_file.path.relative_to(stack_file.project_dir)),
                   **found.json()})
        return
    typer.echo(f"Cost of stack {stack_file.stack} ({spec.name}), offline: an estimate from list prices.")
    typer.echo("\n".join(text_lines(found)))


def _fleet_cost(stack_file: StackFile, as_json: bool) -> None:
    """The cost of a fleet: the shared parts (registry and replicas, a hub) and each member's estimate."""
    from aksgpu.preflight.tables import cost_of, price_table
    from aksgpu.project.stackfile import resolve_stack
    from aksgpu.spec import parse_cluster_spec
    from aksgpu.spec.fleet import parse_fleet_spec
    from aksgpu.preflight.cost import fleet_estimate
    from aksgpu.preflight.cost_report import headline, scale_text, text_lines

    fleet, _ = parse_fleet_spec(stack_file.fleet, source=stack_file.source(FLEET_KEY))
    shared = fleet_estimate(fleet, price_table(stack_file.project_dir))
    members = {}
    for member in fleet.members:
        member_file = resolve_stack(member.stack, cwd=stack_file.project_dir)
        spec, _ = parse_cluster_spec(member_file.cluster, source=member_file.source(CLUSTER_KEY))
        members[member.stack] = cost_of(spec, stack_file.project_dir)
    total = shared.monthly
    for found in members.values():
        total = total + found.monthly
    complete = shared.complete and all(found.complete for found in members.values())
    if as_json:
        echo_json({"stack": stack_file.stack, "fleet": fleet.name, "shared": shared.json(),
                   "members": {stack: found.json() for stack, found in members.items()},
                   "total": {"monthly": total.json(2), "complete": complete}})
        return
    typer.echo(f"Cost of fleet {fleet.name} (stack {stack_file.stack}), offline: an estimate from list prices.")
    typer.echo("\n".join(["", "Shared parts:", *text_lines(shared), "", "Members (`aksgpu cost STACK` for each one's "
                          "detail):", *(f"  {stack}: {headline(found)}" for stack, found in members.items()), "",
                          f"Fleet total: {scale_text(total)} per month at min / typical / max scale"
                          + ("." if complete else " (prices missing: a lower bound).")]))


@prices_app.command("refresh")
def refresh(
    regions: Annotated[list[str] | None, typer.Option(
        "--region", "-r", metavar="REGION",
        help="A region to fetch (repeat it); default: the regions of the current table.")] = None,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", metavar="PATH",
        help="Where to write the table; default: stacks/prices.yaml of the project here, which cost, plan, "
             "ci summary and diff then use.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace PATH even if it is not a price table.")] = False,
) -> None:
    """Fetch today's VM prices from the Azure Retail Prices API and write a new price table.

    Linux pay-as-you-go and spot prices per VM-hour for each region (every page of the API's
    answer); the fixed parts keep the rows and sources of the current table. The file is
    replaced whole or not at all, and a file that is not an aksgpu price table is never
    replaced without --force. Exit codes: 0 written, 1 the API could not be reached (the
    current table stays in use), 2 bad input (PATH, no project).
    """
    from aksgpu.errors import UserError
    from aksgpu.preflight.tables import price_table, project_table_path
    from aksgpu.project.files import write_text_atomically
    from aksgpu.project.stackfile import find_project_dir
    from aksgpu.preflight import retail_prices
    from aksgpu.preflight.prices import is_price_table

    try:
        project_dir = find_project_dir(Path.cwd()) if output is None else None
        target = output or project_table_path(project_dir)  # type: ignore[arg-type]
        current = price_table(project_dir)
    except UserError as error:
        fail(f"{error} Or name the file with --output." if output is None else str(error))
    if target.exists() and not force and not is_price_table(target):
        fail(f"{target} exists and is not an aksgpu price table, so it is left as it is. Fix: choose another "
             "--output, or pass --force to replace it.")
    wanted = regions or current.regions()
    base_url = retail_prices.api_url()
    fetched = {}
    try:
        for region in wanted:
            fetched[region] = retail_prices.vm_rows(retail_prices.fetch_items(region, base_url))
    except retail_prices.RetailPricesError as error:
        fail(f"{error}. Offline? Nothing was written; cost estimates keep using the {current.label()}.",
             EXIT_FAILED)
    empty = [region for region, rows in fetched.items() if not rows]
    if empty:
        fail(f"the API has no Linux VM prices for {', '.join(empty)}; is the region name right "
             "(`az account list-locations -o table`)? Nothing was written.")
    raw = retail_prices.refreshed_table(current, fetched, base_url, datetime.date.today())
    try:
        write_text_atomically(target, retail_prices.table_text(raw))
    except UserError as error:
        fail(error)
    sizes = sum(len(rows) for rows in fetched.values())
    typer.echo(f"wrote {target}: {sizes} VM prices in {', '.join(wanted)}, from {base_url} on "
               f"{raw['retrieved']}; the fixed parts are still those of the {current.label()}.")


def register(app: typer.Typer) -> None:
    """Adds `cost`, the `prices` group and `vm-sizes` to the aksgpu app."""
    from aksgpu.cli.preflight.vm_sizes import vm_sizes

    app.command()(cost)
    app.add_typer(prices_app, name="prices")
    app.command("vm-sizes", context_settings=CONTEXT_SETTINGS)(vm_sizes)
