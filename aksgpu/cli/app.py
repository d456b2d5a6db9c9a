"""The aksgpu command line: the Typer app and its command groups, wired together, and nothing else.

Each concern's commands live with its code (the package map is in cli/__init__.py) and import
Pulumi, Azure, rich and the spec only when they run, so `aksgpu --help` stays fast. Exit codes
(aksgpu/errors.py): 0 success; 1 the spec has errors, or a check found drift; 2 bad input
(unknown environment or preset, unreadable YAML, bad option, missing tool); 3 changes found where
none were expected; 70 a bug in aksgpu (one line; AKSGPU_DEBUG=1 for the traceback); 130 interrupted.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated, Any

import typer
import typer.core
from typer.core import TyperGroup

from aksgpu.cli.arguments import CONTEXT_SETTINGS
from aksgpu.cli.ci import commands as ci_commands
from aksgpu.cli.environments import commands as environment_commands
from aksgpu.errors import EXIT_BROKEN_PIPE, EXIT_INTERNAL_ERROR, EXIT_INTERRUPTED
from aksgpu.cli.plan import commands as plan_commands
from aksgpu.cli.policy import commands as policy_commands
from aksgpu.cli.preflight import commands as preflight_commands
from aksgpu.cli.workflow import commands as workflow_commands

# The click Typer runs on: its own copy (typer._click) in recent Typer releases, click itself in older ones.
_CLICK = getattr(typer.core, "_click", None) or typer.core.click  # type: ignore[attr-defined]
# Exceptions that are Typer's and click's own way to end a command: usage errors (exit 2),
# typer.Exit and aborts. They pass through to Typer, which prints and exits as documented.
_COMMAND_ENDINGS = (typer.Exit, typer.Abort, *(getattr(_CLICK.exceptions, name) for name in
                                                ("ClickException", "Exit", "Abort")
                                                if hasattr(_CLICK.exceptions, name)))


class _Commands(TyperGroup):
    """The top-level command group: whatever happens inside a command ends in one line on
    stderr and a documented exit code, never a traceback (AKSGPU_DEBUG=1 shows it for bugs)."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except _COMMAND_ENDINGS:
            raise
        except KeyboardInterrupt:
            typer.echo("interrupted. Files aksgpu writes are replaced whole, so each is as it was or complete.",
                       err=True)
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except BrokenPipeError:
            # The reader went away (`aksgpu policy list | head`): nothing is wrong and nothing more
            # can be said. Point stdout at /dev/null so flushing at exit raises no second error.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            raise typer.Exit(EXIT_BROKEN_PIPE) from None
        except Exception as error:
            if os.environ.get("AKSGPU_DEBUG"):
                raise
            first_line = (str(error).splitlines() or [""])[0]
            typer.echo(f"error: internal error ({type(error).__name__}: {first_line}). This is a bug in aksgpu. "
                       "Fix: report it with the command and the input files; AKSGPU_DEBUG=1 prints the traceback.",
                       err=True)
            raise typer.Exit(EXIT_INTERNAL_ERROR) from None


app = typer.Typer(
    cls=_Commands,
    name="aksgpu",
    help="AKS GPU clusters from one validated spec: presets and environments, rendered Pulumi stacks, "
         "an offline plan, and the real `pulumi up`.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings=CONTEXT_SETTINGS,
)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"aksgpu {version('aksgpu')}")
        except PackageNotFoundError:
            typer.echo("aksgpu (not installed as a package; run `pip install -e .` in its repository)")
        raise typer.Exit()


@app.callback()
def _options(
    show_version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                               help="Print aksgpu's version and exit.")] = False,
) -> None:
    """Options that come before any command (--version)."""


plan_commands.register(app)
environment_commands.register(app)
workflow_commands.register(app)
preflight_commands.register(app)
app.add_typer(ci_commands.ci_app, name="ci")
app.add_typer(policy_commands.policy_app, name="policy")


def main() -> None:
    """Console-script entry point."""
    try:
        sys.exit(app())
    finally:
        # The command is done and its objects are about to go: at shutdown, Python's collector
        # would still sweep every one of them (about 1 s after a plan). Frozen, it skips them.
        import gc

        gc.freeze()


if __name__ == "__main__":
    main()
