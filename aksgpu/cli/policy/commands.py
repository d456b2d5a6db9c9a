"""`aksgpu policy list` and `aksgpu policy show RULE`: what each security policy checks and why.
Only typer and the standard library at import; the catalog is read when a command runs."""

from __future__ import annotations

from typing import Annotated

import typer

from aksgpu.cli.arguments import CONTEXT_SETTINGS
from aksgpu.cli.console import echo_json, fail_input

policy_app = typer.Typer(help="aksgpu's security policies: what each checks, why, and its sources.",
                         context_settings=CONTEXT_SETTINGS, no_args_is_help=True)


@policy_app.command("list")
def list_rules(as_json: Annotated[bool, typer.Option("--json", help="Print the catalog as JSON.")] = False) -> None:
    """List every policy: id, severity, enforcement and what it wants.

    Mandatory findings fail `aksgpu plan`, `aksgpu validate` and a real preview with the policy
    pack unless waived under policy.waivers (with a reason); advisory ones are reported only.
    """
    from aksgpu.policy.catalog import rules

    if as_json:
        echo_json([{"id": r.id, "title": r.title, "severity": r.severity, "enforcement": r.enforcement,
                    "appliesTo": list(r.applies_to), "reason": r.reason, "fix": r.fix, "sources": list(r.sources)}
                   for r in rules()])
        return
    width = max(len(r.id) for r in rules())
    for r in rules():
        typer.echo(f"{r.id.ljust(width)}  {r.severity:<6}  {r.enforcement:<9}  {r.title}")


@policy_app.command("show")
def show_rule(
        rule_id: Annotated[str, typer.Argument(metavar="RULE", help="A policy id from `aksgpu policy list`.")]) -> None:
    """Show one policy: what it checks, why, how to fix a finding, and the public checks it follows."""
    from aksgpu.spec.base import did_you_mean
    from aksgpu.policy.catalog import rule, rule_ids

    if rule_id not in rule_ids():
        fail_input("RULE argument", rule_id, "is not a policy of aksgpu",
                   f"{did_you_mean(rule_id, sorted(rule_ids()))}see `aksgpu policy list`")
    found = rule(rule_id)
    typer.echo(f"{found.id}: {found.title}\n  severity: {found.severity}, {found.enforcement}\n"
               f"  applies to: {', '.join(found.applies_to)}\n  why: {found.reason}\n  fix: {found.fix}\n"
               f"  sources: {'; '.join(found.sources)}")
