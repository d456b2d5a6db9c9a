"""The aksgpu command line.

Imports of Pulumi, Azure and the spec happen inside the commands, so `aksgpu --help` stays fast.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from cli.stackfile import StackFile
    from components.spec import Issue

app = typer.Typer(
    name="aksgpu",
    help="AKS GPU clusters from one validated spec: plan offline, then `pulumi up` per stack.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)

StackArg = Annotated[
    str,
    typer.Argument(help="An environment name (stacks/Pulumi.<env>.yaml) or the path of a stack file."),
]


def _fail(message: str, code: int = 2) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def _load(stack: str) -> tuple[StackFile, list[Issue]]:
    """The stack file and its spec's warnings; exits 2 on bad input and 1 on spec errors."""
    from cli.stackfile import UserError, resolve_stack
    from components.spec import SpecError, parse_cluster_spec

    try:
        stack_file = resolve_stack(stack)
    except UserError as error:
        _fail(str(error))
    try:
        _, warnings = parse_cluster_spec(stack_file.cluster, source=f"aksgpu:cluster in {stack_file.path.name}")
    except SpecError as error:
        typer.echo(str(error), err=True)
        raise typer.Exit(1) from None
    return stack_file, warnings


@app.command()
def plan(
    stack: StackArg,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan document (JSON) instead of text.")] = False,
) -> None:
    """Show every resource `pulumi up` would create for a stack, offline.

    Runs the real Pulumi program under Pulumi's mock runtime: no Azure account, no Pulumi CLI,
    no network. Exit codes: 0 planned, 1 the spec has errors, 2 bad input (stack, YAML).
    """
    stack_file, warnings = _load(stack)

    from cli.planner import plan_stack
    from cli.report import plan_document, render_text

    result = plan_stack(stack_file)
    if as_json:
        typer.echo(json.dumps(plan_document(result, warnings), indent=2, sort_keys=False, default=str))
    else:
        typer.echo(render_text(result, warnings))


@app.command()
def validate(stack: StackArg) -> None:
    """Check a stack's cluster spec against every rule, and print all problems at once.

    Exit codes: 0 valid (warnings may be printed), 1 the spec has errors, 2 bad input.
    """
    stack_file, warnings = _load(stack)
    for warning in warnings:
        typer.echo(f"warning: {warning}")
    typer.echo(f"{stack_file.path.name}: valid ({len(warnings)} warnings)")


def main() -> None:
    """Console-script entry point."""
    sys.exit(app())


if __name__ == "__main__":
    main()
