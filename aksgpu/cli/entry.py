"""The console script `aksgpu`: app.py's main, with Ctrl-C at any moment, importing Typer, Pulumi
and the commands included, ending in one line and exit 130 rather than a Python traceback.

Only the standard library is imported here, so an interrupt while app.py loads is caught.
"""

from __future__ import annotations

import sys

EXIT_INTERRUPTED = 130  # aksgpu.errors.EXIT_INTERRUPTED, not imported so that nothing loads before the guard


def main() -> None:
    """Console-script entry point."""
    try:
        from aksgpu.cli.app import main as run

        run()
    except KeyboardInterrupt:
        sys.stderr.write("interrupted. Files aksgpu writes are replaced whole, so each is as it was or complete.\n")
        sys.exit(EXIT_INTERRUPTED)
