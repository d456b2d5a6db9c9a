"""Arguments and options several commands share, with shell completion of their values.

Completion runs on every Tab press, so it reads only file names and environments.yaml, and a
problem (no project here, a broken file) completes nothing rather than printing an error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

# -h works wherever --help does (what people try first).
CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}


def environment_names(incomplete: str = "") -> list[str]:
    """Environments of the project here (environments.yaml and stack files), for completion."""
    try:
        from aksgpu.environments.file import load_environments

        environments = load_environments()
        names = set(environments.names)
        names |= {path.name[len("Pulumi."):-len(".yaml")] for path in environments.path.parent.glob("Pulumi.*.yaml")}
    except Exception:  # noqa: BLE001 - completion must never fail the shell; it completes nothing
        return []
    return sorted(name for name in names if name.startswith(incomplete))


def stack_targets(incomplete: str = "") -> list[str]:
    """Environment names, and stack file paths once the user types a path."""
    if "/" in incomplete or incomplete.startswith("."):
        folder = Path(incomplete).parent
        try:
            return sorted(str(path) for path in folder.glob("Pulumi.*.yaml") if str(path).startswith(incomplete))
        except OSError:
            return []
    return environment_names(incomplete)


def preset_names(incomplete: str = "") -> list[str]:
    from aksgpu.environments.presets import preset_names as names

    return [name for name in names() if name.startswith(incomplete)]


StackArg = Annotated[str, typer.Argument(
    help="An environment name (stacks/Pulumi.<env>.yaml) or the path of a stack file.",
    autocompletion=stack_targets)]
EnvironmentArg = Annotated[str, typer.Argument(help="An environment.", autocompletion=environment_names)]
EnvironmentsArg = Annotated[list[str] | None, typer.Argument(
    help="Environments in stacks/environments.yaml (default: all of them).", show_default=False,
    autocompletion=environment_names)]
PresetOption = Annotated[str, typer.Option(
    "--preset", "-p", metavar="PRESET", help="The preset to start from (aksgpu presets list).",
    autocompletion=preset_names)]
PresetArg = Annotated[str, typer.Argument(help="A preset (aksgpu presets list).", autocompletion=preset_names)]
