"""The console script `aksgpu`: app.py's main, with Ctrl-C at any moment, importing Typer, Pulumi
and the commands included, ending in one line and exit 130 rather than a Python traceback.

Only the standard library is imported here, so an interrupt while app.py loads is caught.
"""

from __future__ import annotations

import os
import sys

EXIT_INTERRUPTED = 130  # aksgpu.errors.EXIT_INTERRUPTED, not imported so that nothing loads before the guard
EXIT_BROKEN_PIPE = 141  # aksgpu.errors.EXIT_BROKEN_PIPE, likewise


def version_text() -> str:
    """What `aksgpu --version` prints: app.py's --version prints the same (tests/test_cli_conventions.py
    compares them; app.py does not import this module, which imports it)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"aksgpu {version('aksgpu')}"
    except PackageNotFoundError:
        return "aksgpu (not installed as a package; run `pip install -e .` in its repository)"


def main() -> None:
    """Console-script entry point. `aksgpu --version` and `aksgpu --help` alone are answered here,
    without loading Typer and the commands (a third, and two thirds, of the time otherwise); the
    app prints the same text (cli/short_help.py, held to the app by tests/test_cli_short_help.py)."""
    fast = sys.argv[1:] == ["--version"] or (sys.argv[1:] in (["--help"], ["-h"])
                                            and os.path.basename(sys.argv[0]) == "aksgpu")
    if fast:
        try:
            if sys.argv[1:] == ["--version"]:
                text = version_text()
            else:
                from aksgpu.cli.short_help import help_text

                text = help_text()
            sys.stdout.write(text + "\n")
            sys.stdout.flush()
        except BrokenPipeError:  # the reader went away, as cli/app.py answers it
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(EXIT_BROKEN_PIPE)
        return
    # The collector is paused while the app loads (Typer and the commands' module allocate what lives
    # until the command ends); cli/app.py's main turns it back on unless the command is a short one.
    import gc

    gc.disable()
    try:
        from aksgpu.cli.app import main as run

        run()
    except KeyboardInterrupt:
        sys.stderr.write("interrupted. Files aksgpu writes are replaced whole, so each is as it was or complete.\n")
        sys.exit(EXIT_INTERRUPTED)
