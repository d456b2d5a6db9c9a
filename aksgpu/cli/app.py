"""The aksgpu command line: the Typer app and its command groups, wired together, and nothing else.

Each concern's commands live with its code (the package map is in cli/__init__.py) and import
Pulumi, Azure, rich and the spec only when they run, so `aksgpu --help` stays fast; the console
script (main) loads only the module of the command it runs (CONCERNS), `app` has every command. Exit codes
(aksgpu/errors.py): 0 success; 1 the spec has errors, or a check found drift; 2 bad input
(unknown environment or preset, unreadable YAML, bad option, missing tool); 3 changes found where
none were expected; 70 a bug in aksgpu (one line; AKSGPU_DEBUG=1 for the traceback); 130 interrupted.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Iterable
from typing import Annotated, Any

import typer
import typer.core
from typer.core import TyperGroup

from aksgpu.cli.arguments import CONTEXT_SETTINGS
from aksgpu.cli.console import FAILURE, OUTPUT, echo_json, fail, failure_document
from aksgpu.errors import (EXIT_BROKEN_PIPE, EXIT_INTERNAL_ERROR, EXIT_INTERRUPTED, EXIT_USAGE, UserError,
                           error_document)

# The click Typer runs on: its own copy (typer._click) in recent Typer releases, click itself in older ones.
_CLICK = getattr(typer.core, "_click", None) or typer.core.click  # type: ignore[attr-defined]
# Exceptions that are Typer's and click's own way to end a command: usage errors (exit 2),
# typer.Exit and aborts. They pass through to Typer, which prints and exits as documented.
_COMMAND_ENDINGS = (typer.Exit, typer.Abort, *(getattr(_CLICK.exceptions, name) for name in
                                                ("ClickException", "Exit", "Abort")
                                                if hasattr(_CLICK.exceptions, name)))
_USAGE_ERRORS = (_CLICK.exceptions.UsageError,)


class _TrackedStdout:
    """sys.stdout while a command runs, noting whether anything was written: a command that fails
    under --json having printed nothing gets its error as a JSON document on stdout instead."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.written = False

    def write(self, text: str) -> int:
        self.written = self.written or bool(text)
        return int(self._stream.write(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _asks_for_json(ctx: Any) -> bool:
    """Whether the command line names --json before any `--` (the commands that print JSON)."""
    arguments = [*getattr(ctx, "protected_args", []), *ctx.args]
    return "--json" in arguments[:arguments.index("--")] if "--" in arguments else "--json" in arguments


class _Commands(TyperGroup):
    """The top-level command group: whatever happens inside a command ends in one line on
    stderr and a documented exit code, never a traceback (AKSGPU_DEBUG=1 shows it for bugs).
    Under --json a command that fails without printing its document prints the error as one
    (aksgpu.errors.error_document) on stdout, so a script reading stdout always gets JSON."""

    def invoke(self, ctx: Any) -> Any:
        FAILURE.json_output, FAILURE.error, FAILURE.message = _asks_for_json(ctx), None, None
        OUTPUT.quiet = False
        tracked = _TrackedStdout(sys.stdout)
        sys.stdout = tracked
        try:
            return self._invoke(ctx)
        except typer.Exit as ending:
            if ending.exit_code and FAILURE.json_output and not tracked.written:
                echo_json(failure_document(ending.exit_code))
            raise
        except _USAGE_ERRORS as error:
            if FAILURE.json_output and not tracked.written:
                echo_json(error_document(error.format_message(), EXIT_USAGE))
            raise
        finally:
            if sys.stdout is tracked:
                sys.stdout = tracked._stream

    def _invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except _COMMAND_ENDINGS:
            raise
        except UserError as error:
            # A domain error no command caught itself: printed as every command prints one.
            fail(error)
        except KeyboardInterrupt:
            FAILURE.message = "interrupted. Files aksgpu writes are replaced whole, so each is as it was or complete."
            typer.echo(FAILURE.message, err=True)
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
            fail(f"internal error ({type(error).__name__}: {first_line}). This is a bug in aksgpu. "
                 "Fix: report it with the command and the input files; AKSGPU_DEBUG=1 prints the traceback.",
                 EXIT_INTERNAL_ERROR)


def _new_app() -> typer.Typer:
    """The aksgpu group, its options and no command yet."""
    group = typer.Typer(
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
    group.callback()(_options)
    return group


def _print_version(value: bool) -> None:
    if value:  # the console script answers `aksgpu --version` alone with the same line (cli/entry.py)
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"aksgpu {version('aksgpu')}")
        except PackageNotFoundError:
            typer.echo("aksgpu (not installed as a package; run `pip install -e .` in its repository)")
        raise typer.Exit()


def _options(
    show_version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                               help="Print aksgpu's version and exit.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print no status lines or spinners on stderr; "
                                        "errors still print.")] = False,
) -> None:
    """Options that come before any command (--version, --quiet)."""
    OUTPUT.quiet = quiet


# The top-level commands each concern's module adds, in its order (cli/__init__.py has the map).
# The console script loads only the module of the command it runs (main(); the others' imports and
# Typer's reading of their signatures cost about 15 ms); tests/test_cli_lazy.py holds this to the modules.
CONCERNS: dict[str, tuple[str, ...]] = {
    "plan": ("plan",),
    "environments": ("validate", "render", "init", "new", "diff", "schema", "presets"),
    "workflow": ("preview", "up", "destroy", "refresh", "outputs", "kubeconfig", "backend"),
    "preflight": ("cost", "vm-sizes", "prices"),
    "promotion": ("promote",),
    "ci": ("ci",),
    "policy": ("policy",),
    "capacity": ("verdict-history",),
}


def _add(group: typer.Typer, concern: str) -> None:
    """Adds one concern's commands to the group."""
    if concern == "plan":
        from aksgpu.cli.plan import commands as plan_commands

        plan_commands.register(group)
    elif concern == "environments":
        from aksgpu.cli.environments import commands as environment_commands

        environment_commands.register(group)
    elif concern == "workflow":
        from aksgpu.cli.workflow import commands as workflow_commands

        workflow_commands.register(group)
    elif concern == "preflight":
        from aksgpu.cli.preflight import commands as preflight_commands

        preflight_commands.register(group)
    elif concern == "ci":
        from aksgpu.cli.ci import commands as ci_commands

        group.add_typer(ci_commands.ci_app, name="ci")
    elif concern == "promotion":
        from aksgpu.cli.promotion import commands as promotion_commands

        promotion_commands.register(group)
    elif concern == "policy":
        from aksgpu.cli.policy import commands as policy_commands

        group.add_typer(policy_commands.policy_app, name="policy")
    elif concern == "capacity":
        from aksgpu.cli.capacity import commands as capacity_commands

        group.add_typer(capacity_commands.history_app, name="verdict-history")


def app_with(concerns: Iterable[str] = CONCERNS) -> typer.Typer:
    """The aksgpu app with the commands of `concerns` (every command by default)."""
    group = _new_app()
    for concern in concerns:
        _add(group, concern)
    return group


def _concern_of(args: list[str]) -> str | None:
    """The concern whose module holds the command a command line runs: its first word, after --quiet
    alone (the group's other options print the group's help or end it, and read the whole app).
    None when it names no command, and while the shell completes a word (completion reads the app)."""
    if any(name.startswith("_") and name.endswith("_COMPLETE") for name in os.environ):
        return None
    words = [arg for arg in args if arg not in ("-q", "--quiet")]
    if not words or words[0].startswith("-"):
        return None
    return next((concern for concern, names in CONCERNS.items() if words[0] in names), None)


@functools.cache
def _full_app() -> typer.Typer:
    return app_with()


def __getattr__(name: str) -> typer.Typer:
    """`app`: every command, built when first asked for (tests, tools/docs_reference.py)."""
    if name == "app":
        return _full_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """Console-script entry point."""
    import gc

    concern = _concern_of(sys.argv[1:])
    if concern == "environments":
        # Short offline commands: what they allocate (modules, the spec's models, the rendered
        # stacks) lives until they end, and the collector's passes over it cost about a tenth of
        # `validate --spec-only` while freeing almost nothing (the planner pauses it likewise).
        gc.disable()
    else:  # on again if the console script paused it while the app loaded (cli/entry.py)
        gc.enable()
    try:
        sys.exit(app_with([concern] if concern else CONCERNS)())
    finally:
        # The command is done and its objects are about to go: at shutdown, Python's collector
        # would still sweep every one of them (about 1 s after a plan). Frozen, it skips them.
        gc.freeze()


if __name__ == "__main__":
    main()
