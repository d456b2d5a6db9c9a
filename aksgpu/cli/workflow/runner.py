"""Running Pulumi through its Automation API for one stack: opening it in its backend, the steps
every command takes before the engine starts (spec valid, stack file rendered, prerequisites
present, confirmation possible), streaming the engine's output, and turning its errors and change
summaries into one clear message or line. pulumi.automation is imported only when a stack opens.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from aksgpu.cli.console import fail, fail_problems, say
from aksgpu.errors import MISSING, Problem, UserError
from aksgpu.errors import EXIT_FAILED, EXIT_INTERRUPTED
from aksgpu.stack_config import CLUSTER_KEY, FLEET_KEY, FLEET_UPGRADES_KEY
from aksgpu.workflow.target import PULUMI_CLI_MISSING, Target, check_readiness, readiness_message, target_for

if TYPE_CHECKING:
    from pulumi.automation import Stack

    from aksgpu.project.stackfile import StackFile
    from aksgpu.spec import ClusterSpec
    from aksgpu.spec.fleet import FleetSpec, FleetUpgradesSpec

# Preview operations that change nothing in Azure.
NO_CHANGE_OPS = frozenset({"same", "read"})
SECRET_MASK = "[secret]"  # a secret output, as `aksgpu outputs` shows it without --show-secrets


def open_stack(target: Target, *, create: bool) -> Stack:
    """The stack through the Automation API on this project (a local program: Pulumi.yaml and the
    stack files in stacks/). `create`: create it in the backend when it does not exist yet."""
    from pulumi import automation as auto

    if target.local_state_dir is not None:
        target.local_state_dir.mkdir(parents=True, exist_ok=True)
    options = auto.LocalWorkspaceOptions(env_vars=target.workspace_env(), secrets_provider=target.secrets_provider)
    open_fn = auto.create_or_select_stack if create else auto.select_stack
    try:
        return open_fn(stack_name=target.stack, work_dir=str(target.project_dir), opts=options)
    except FileNotFoundError as error:
        # The SDK runs `pulumi version` first; with no CLI that is the error it gets.
        if error.filename and Path(str(error.filename)).name != "pulumi":
            raise
        raise UserError(PULUMI_CLI_MISSING) from None
    except subprocess.CalledProcessError as error:
        raise UserError(f"`pulumi version` failed (exit code {error.returncode}): the Pulumi CLI on PATH "
                        f"({shutil.which('pulumi')}) does not work. Fix: reinstall it "
                        "(https://www.pulumi.com/docs/iac/download-install/).") from None


def summarize_changes(change_summary: Mapping[Any, int] | None) -> dict[str, int]:
    """An engine change summary as {operation: count}, zero counts dropped."""
    summary: dict[str, int] = {}
    for operation, count in (change_summary or {}).items():
        if count:
            summary[str(getattr(operation, "value", operation))] = int(count)
    return summary


def has_changes(changes: Mapping[str, int]) -> bool:
    return any(count for operation, count in changes.items() if operation not in NO_CHANGE_OPS)


def describe_changes(changes: Mapping[str, int]) -> str:
    parts = [f"{count} to {operation}" for operation, count in changes.items() if operation not in NO_CHANGE_OPS]
    unchanged = changes.get("same", 0)
    if not parts:
        return f"no changes ({unchanged} unchanged)"
    return ", ".join(parts) + (f", {unchanged} unchanged" if unchanged else "")


def first_error_line(text: str) -> str | None:
    """The engine's own error from a failed Pulumi command's output, skipping the generic summaries."""
    generic = re.compile(r"^error: (update|preview|refresh|destroy) failed$|^error: an error occurred", re.I)
    for line in text.splitlines():
        # str(CommandError) starts its stdout and stderr on the " stdout: " / " stderr: " lines.
        line = re.sub(r"^\s*(stdout|stderr):\s*", "", line).strip()
        if line.lower().startswith("error:") and not generic.match(line):
            return line[len("error:"):].strip()
    return None


def automation_error_message(error: BaseException, target: Target, operation: str) -> str | None:
    """One clear message for an Automation API error; None when `error` is not one."""
    errors = sys.modules.get("pulumi.automation.errors")
    if errors is None:
        return None
    stack = target.stack
    if isinstance(error, errors.ConcurrentUpdateError):
        return (f"stack {stack} is locked by another update (an `aksgpu up`, `pulumi up` or CI job). Fix: wait for "
                f"it to finish; if none is running (a run was killed), clear the lock with "
                f"`PULUMI_BACKEND_URL={target.backend_url} pulumi cancel --stack {stack}`.")
    if isinstance(error, errors.StackNotFoundError):
        return (f"stack {stack} does not exist in the backend {target.backend_url} ({target.backend_source}). Fix: "
                f"create it with `aksgpu up {stack}`, or point at the backend that holds it with --backend or "
                "backend: in stacks/environments.yaml.")
    if isinstance(error, errors.InvalidVersionError):
        return f"the Pulumi CLI on PATH is too old for this Pulumi SDK: {error}. Fix: upgrade the CLI."
    if isinstance(error, errors.CommandError):
        detail = first_error_line(str(error))
        what = "the Pulumi program failed" if isinstance(error, (errors.RuntimeError, errors.CompilationError)) \
            else f"`pulumi {operation}` failed"
        return (f"{what} for stack {stack}" + (f": {detail}" if detail else "")
                + ". The engine's full output is above.")
    if type(error).__name__ == "RuntimeError" and "summary event never found" in str(error):
        return (f"`pulumi {operation}` ended without a summary for stack {stack}: the engine stopped early. "
                "Its output is above.")
    return None


@contextmanager
def command_errors(operation: str, target_box: list[Target]) -> Iterator[None]:
    """Turns user errors and Automation API errors into one message and an exit code, never a traceback."""
    try:
        yield
    except typer.Exit:
        raise
    except UserError as error:
        fail(error)
    except KeyboardInterrupt:
        stack = target_box[0].stack if target_box else "ENV"
        fail(f"interrupted. Pulumi was told to stop; if it was changing resources, run `aksgpu refresh {stack}` to "
              f"bring the state in line with Azure (and `pulumi cancel --stack {stack}` if the stack stays locked).",
              EXIT_INTERRUPTED)
    except Exception as error:  # only Automation API errors are translated; others re-raise
        message = automation_error_message(error, target_box[0], operation) if target_box else None
        if message is None:
            raise
        fail(message, EXIT_FAILED)


def stdin_is_interactive() -> bool:
    """Whether a person can answer a confirmation (tests replace it)."""
    return sys.stdin.isatty()


class EngineOutput:
    """Streams the engine's lines as they come: to stdout, or to stderr when stdout carries JSON."""

    def __init__(self, to_stderr: bool) -> None:
        self.to_stderr = to_stderr
        stream = sys.stderr if to_stderr else sys.stdout
        self.color = "always" if stream.isatty() else "never"

    def out(self, line: str) -> None:
        typer.echo(line, err=self.to_stderr)

    def err(self, line: str) -> None:
        typer.echo(line, err=True)

    def options(self) -> dict[str, Any]:
        return {"on_output": self.out, "on_error": self.err, "color": self.color}


def prepare(stack: str, backend: str | None, secrets_provider: str | None,
            box: list[Target]) -> tuple[StackFile, Target]:
    """The stack file and where its stack lives; the target also goes into `box`, so
    command_errors can name the stack in its messages."""
    from aksgpu.project.stackfile import resolve_stack

    stack_file = resolve_stack(stack)
    target = target_for(stack_file, backend_flag=backend, secrets_provider_flag=secrets_provider, env=os.environ)
    box.append(target)
    return stack_file, target


def require_ready(command: str, stack_file: StackFile, target: Target, *, needs_azure: bool) -> None:
    readiness = check_readiness(target, env=os.environ, config=stack_file.config, needs_azure=needs_azure)
    for warning in readiness.warnings:
        say(f"warning: {warning}", "yellow")
    if readiness.problems:
        raise UserError(readiness_message(command, target.stack, readiness.problems, suggest_plan=needs_azure))


def require_confirmable(command: str, stack: str) -> None:
    if not stdin_is_interactive():
        raise UserError(problems=[Problem("--yes", MISSING, f"`aksgpu {command} {stack}` asks for confirmation, but "
                                          "stdin is not a terminal (a script or CI job), so it cannot ask",
                                          f"pass --yes to go ahead without asking (review `aksgpu preview {stack}` "
                                          "first)")])


def policy_packs(folders: list[Path] | None) -> list[str] | None:
    """Policy pack folders as the engine takes them; each must hold a PulumiPolicy.yaml."""
    for folder in folders or []:
        if not (folder / "PulumiPolicy.yaml").is_file():
            raise UserError(problems=[Problem("--policy-pack", str(folder), "no PulumiPolicy.yaml there, so it is not "
                                              "a policy pack", "point at the folder of a Pulumi policy pack")])
    return [str(folder.resolve()) for folder in folders] if folders else None


def require_rendered(command: str, stack_file: StackFile) -> None:
    """`up` deploys only a stack file that matches stacks/environments.yaml; `preview` warns."""
    from aksgpu.environments.render import EnvironmentNotRendered, render_state

    name = stack_file.stack
    try:
        rendered = render_state(stack_file)
    except EnvironmentNotRendered as error:
        if command == "up":
            raise
        say(f"warning: {error}", "yellow")
        return
    if rendered is None or rendered.state == "current":
        return
    if rendered.state == "stale" and command == "up":
        raise UserError(f"{stack_file.path.name} is out of date with stacks/environments.yaml, so `aksgpu up {name}` "
                        f"would deploy something else than the environment says. Fix: run `aksgpu render {name}`, "
                        "review and commit the change, then run up again.")
    why = rendered.reason or "it is out of date with stacks/environments.yaml"
    say(f"warning: {stack_file.path.name} is not what `aksgpu render {name}` would write: {why}. "
         "Pulumi uses the stack file as it is.", "yellow")


def validate_spec(stack_file: StackFile) -> ClusterSpec | FleetSpec | FleetUpgradesSpec:
    """The spec (a fleet's shared stack: its FleetSpec), or its errors before Pulumi starts: the same
    message as `aksgpu validate`, exit 1."""
    from aksgpu.spec import SpecError, parse_cluster_spec
    from aksgpu.spec.fleet import parse_fleet_spec, parse_fleet_upgrades_spec

    spec: ClusterSpec | FleetSpec
    try:
        if stack_file.is_fleet:
            spec, _ = parse_fleet_spec(stack_file.fleet, source=stack_file.source(FLEET_KEY))
            return spec
        if stack_file.is_fleet_upgrades:
            upgrades, _ = parse_fleet_upgrades_spec(stack_file.fleet_upgrades,
                                                    source=stack_file.source(FLEET_UPGRADES_KEY))
            return upgrades
        spec, _ = parse_cluster_spec(stack_file.cluster, source=stack_file.source(CLUSTER_KEY))
    except SpecError as error:
        fail_problems(error)
    return spec


# What aksgpu's policy pack folder (policy/ as `aksgpu new` writes it) runs: how it is recognised.
AKSGPU_PACK_MARKER = "aksgpu.policy.pack"


@contextmanager
def policy_options(folders: list[Path] | None,
                   spec: ClusterSpec | FleetSpec | FleetUpgradesSpec) -> Iterator[dict[str, Any]]:
    """The engine's policy pack options: the packs, and for aksgpu's own pack a configuration file
    carrying the environment's waivers (other packs get an empty one, as the engine pairs each
    configuration with the pack in the same place; a fleet's shared stack has no waivers). Empty
    without packs."""
    import tempfile

    from aksgpu.policy.pack import pack_config

    packs = policy_packs(folders)
    if not packs:
        yield {}
        return
    with tempfile.TemporaryDirectory(prefix="aksgpu-policy-") as folder:
        configs = []
        for index, pack in enumerate(packs):
            main = Path(pack) / "__main__.py"
            ours = main.is_file() and AKSGPU_PACK_MARKER in main.read_text(encoding="utf-8", errors="replace")
            config = Path(folder) / f"pack-{index}.json"
            waivers = getattr(getattr(spec, "policy", None), "waivers", [])
            config.write_text(json.dumps(pack_config(waivers) if ours else {}), encoding="utf-8")
            configs.append(str(config))
        yield {"policy_packs": packs, "policy_pack_configs": configs}


def print_header(command: str, target: Target) -> None:
    say(f"aksgpu {command} {target.stack}", "bold")
    say(f"  backend  {target.backend_url}  ({target.backend_source})", "dim")
    provider = target.secrets_provider or "service"
    say(f"  secrets  {provider}  ({target.secrets_source})", "dim")


def is_protected(stack_file: StackFile) -> bool:
    spec = stack_file.fleet if stack_file.is_fleet else stack_file.cluster
    return isinstance(spec, dict) and spec.get("protect") is True


def protected_in_state(deployment: Mapping[str, Any] | None) -> list[str]:
    """URNs of the resources a stack's state marks protected (`pulumi stack export`)."""
    resources = (deployment or {}).get("resources") or []
    return [str(resource.get("urn")) for resource in resources
            if isinstance(resource, dict) and resource.get("protect")]


def report_update(operation: str, target: Target, summary: Any, as_json: bool,
                   outputs: Mapping[str, tuple[Any, bool]] | None = None) -> None:
    changes = summarize_changes(getattr(summary, "resource_changes", None))
    outcome = str(getattr(summary, "result", "succeeded"))
    if as_json:
        document: dict[str, Any] = {"stack": target.stack, "backend": target.backend_url, "operation": operation,
                                    "result": outcome, "changes": changes}
        if outputs is not None:
            document["outputs"] = outputs_document(outputs, show_secrets=False)
        typer.echo(json.dumps(document, indent=2, default=str))
    else:
        counts = ", ".join(f"{count} {op}" for op, count in changes.items()) or "no resources"
        say(f"{operation} of {target.stack}: {outcome} ({counts}).", "bold" if outcome == "succeeded" else "red")
    if outcome != "succeeded":
        raise typer.Exit(EXIT_FAILED)


def outputs_document(outputs: Mapping[str, tuple[Any, bool]], *, show_secrets: bool) -> dict[str, Any]:
    """Stack outputs {name: value}; secret values masked unless `show_secrets`."""
    return {name: (value if show_secrets or not secret else SECRET_MASK)
            for name, (value, secret) in sorted(outputs.items())}


def outputs_text(outputs: Mapping[str, tuple[Any, bool]], *, show_secrets: bool) -> str:
    document = outputs_document(outputs, show_secrets=show_secrets)
    if not document:
        return ""
    width = max(len(name) for name in document)
    lines: list[str] = []
    for name, value in document.items():
        text = value if isinstance(value, str) else json.dumps(value)
        if "\n" in text.strip():
            lines.append(name)
            lines += [f"    {line}" for line in text.rstrip("\n").splitlines()]
        else:
            suffix = "  (--show-secrets to print)" if value == SECRET_MASK and outputs[name][1] else ""
            lines.append(f"{name.ljust(width)}  {text}{suffix}")
    return "\n".join(lines)
