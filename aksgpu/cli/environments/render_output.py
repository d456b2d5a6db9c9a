"""What `aksgpu render` prints beyond "updated": the --check report, the refusal of a change that
replaces resources, and the note on system pool fields only a new cluster reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from aksgpu.environments.replacement import system_pool_note


def system_pool_notes(rendered: Any) -> None:
    """The note for a re-render that changes system pool fields (applied on a new cluster only)."""
    if rendered.state != "current" and rendered.impact.not_applied:
        typer.echo(system_pool_note(rendered.environment, rendered.impact.not_applied), err=True)


def render_check(rendered_stacks: list[Any], project: Path, failed: list[str]) -> None:
    """`render --check`: each file's state and diff; exit 1 when any differs or did not render."""
    out_of_date = [r for r in rendered_stacks if r.state in ("new", "stale")]
    hand_edited = [r for r in rendered_stacks if r.state == "hand-edited"]
    replacing = [r for r in rendered_stacks if r.refusal()]
    for rendered in rendered_stacks:
        relative = rendered.path.relative_to(project)
        if rendered.state == "current":
            typer.echo(f"{relative}: up to date")
            continue
        why = {"new": "missing", "stale": "out of date", "hand-edited": f"edited by hand: {rendered.reason}"}
        typer.echo(f"{relative}: {why[rendered.state]}")
        typer.echo(rendered.diff(project))
        system_pool_notes(rendered)
    for rendered in replacing:
        typer.echo(f"error: {rendered.refusal()}", err=True)
    if out_of_date:
        typer.echo(f"{len(out_of_date)} stack file(s) differ from what `aksgpu render` writes. "
                   f"Fix: run `aksgpu render {' '.join(r.environment for r in out_of_date)}` and commit the result.",
                   err=True)
    if hand_edited:
        typer.echo(f"{len(hand_edited)} stack file(s) were edited by hand, and `aksgpu render` keeps them. Fix: move "
                   "each change into stacks/environments.yaml, then run "
                   f"`aksgpu render {' '.join(r.environment for r in hand_edited)} --force` (the edited file is kept "
                   "as a .bak) and commit the result.", err=True)
    if failed:
        typer.echo(f"not checked: {', '.join(failed)} does not render (see above).", err=True)
    if out_of_date or hand_edited or failed:
        raise typer.Exit(1)
