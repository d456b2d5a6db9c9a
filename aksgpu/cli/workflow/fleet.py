"""`aksgpu up FLEET`: a fleet's shared stack, then its members in parallel.

Members read the shared stack's outputs through a stack reference, so the shared stack goes first;
the members then deploy side by side (different resource groups, no shared Azure operation), at
most `parallel` at a time. Each step previews and asks first unless --yes; one member's failure
does not stop the others, and the command then exits 1 naming every member that failed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from aksgpu.cli.console import say
from aksgpu.cli.errors import UserError
from aksgpu.cli.exit_codes import EXIT_FAILED
from aksgpu.cli.project.stackfile import StackFile, resolve_stack
from aksgpu.cli.workflow.runner import (
    EngineOutput,
    describe_changes,
    open_stack,
    policy_options,
    report_update,
    require_ready,
    require_rendered,
    summarize_changes,
    validate_spec,
)
from aksgpu.cli.workflow.target import Target, target_for


@dataclass(frozen=True)
class FleetStep:
    stack_file: StackFile
    target: Target
    spec: Any


class PrefixedOutput(EngineOutput):
    """Engine lines of one of several parallel runs, each line led by its stack's name."""

    _lock = threading.Lock()

    def __init__(self, to_stderr: bool, stack: str) -> None:
        super().__init__(to_stderr)
        self.prefix = f"[{stack}] "

    def out(self, line: str) -> None:
        with self._lock:
            super().out("\n".join(self.prefix + part for part in line.rstrip("\n").split("\n")))

    def err(self, line: str) -> None:
        with self._lock:
            super().err("\n".join(self.prefix + part for part in line.rstrip("\n").split("\n")))


def fleet_steps(shared: StackFile, members: list[str] | None, *, backend: str | None,
                secrets_provider: str | None, env: dict[str, str]) -> tuple[FleetStep, list[FleetStep]]:
    """The shared stack's step and the members' (all, or those named by member name or stack)."""
    from aksgpu.components.spec.fleet import FleetSpec

    spec = validate_spec(shared)
    assert isinstance(spec, FleetSpec)
    known = {member.name: member.stack for member in spec.members}
    wanted = list(members or [])
    unknown = [name for name in wanted if name not in known and name not in known.values()]
    if unknown:
        raise UserError(f"--member {', '.join(unknown)}: not a member of fleet {shared.stack}. Fix: use some of: "
                        f"{', '.join(known)}.")
    steps = []
    for name, stack in known.items():
        if wanted and name not in wanted and stack not in wanted:
            continue
        member_file = resolve_stack(stack, cwd=shared.project_dir)
        steps.append(FleetStep(member_file, _target(member_file, backend, secrets_provider, env),
                               validate_spec(member_file)))
    return (FleetStep(shared, _target(shared, backend, secrets_provider, env), spec), steps)


def _target(stack_file: StackFile, backend: str | None, secrets_provider: str | None,
            env: dict[str, str]) -> Target:
    return target_for(stack_file, backend_flag=backend, secrets_provider_flag=secrets_provider, env=env)


def up_fleet(shared: FleetStep, members: list[FleetStep], *, yes: bool, parallel: int, diff: bool, refresh: bool,
             policy_pack: list[Path] | None, as_json: bool,
             confirm: Callable[[str], bool] | None = None) -> None:
    """Deploy the shared stack, then the members; raises typer.Exit(1) when anything failed or was declined."""
    confirm = confirm or (lambda question: typer.confirm(question, default=False, err=True))
    for step in [shared, *members]:
        require_rendered("up", step.stack_file)
        require_ready("up", step.stack_file, step.target, needs_azure=True)
    say(f"aksgpu up {shared.target.stack}: the shared stack, then {len(members)} member(s), at most {parallel} "
        "at a time.", "bold")
    if not _up_all([shared], yes=yes, parallel=1, diff=diff, refresh=refresh, policy_pack=policy_pack,
                   as_json=as_json, confirm=confirm, what=f"the fleet's shared stack {shared.target.stack}"):
        raise typer.Exit(EXIT_FAILED)
    if members and not _up_all(members, yes=yes, parallel=parallel, diff=diff, refresh=refresh,
                               policy_pack=policy_pack, as_json=as_json, confirm=confirm,
                               what=f"{len(members)} member stack(s)"):
        raise typer.Exit(EXIT_FAILED)


def run_steps(steps: list[FleetStep], operation: str, *, parallel: int, diff: bool, refresh: bool,
              policy_pack: list[Path] | None, as_json: bool) -> dict[str, Any]:
    """`preview` or `up` of each step, `parallel` at a time: the result, or the error, by stack."""
    outputs = {step.target.stack: PrefixedOutput(as_json, step.target.stack) if len(steps) > 1 else
               EngineOutput(to_stderr=as_json) for step in steps}

    def run(step: FleetStep) -> Any:
        engine = outputs[step.target.stack]
        stack = open_stack(step.target, create=True)
        with policy_options(policy_pack, step.spec) as policies:
            if operation == "preview":
                return stack.preview(diff=diff, refresh=refresh, **policies, **engine.options())
            return stack.up(diff=diff, refresh=refresh, **policies, **engine.options())

    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        futures = {step.target.stack: pool.submit(run, step) for step in steps}
    results: dict[str, Any] = {}
    for stack, future in futures.items():
        try:
            results[stack] = future.result()
        except Exception as error:  # noqa: BLE001 - one member's failure is reported, the others go on
            results[stack] = error
    return results


def report_previews(previews: dict[str, Any]) -> list[str]:
    """Says each preview's changes; returns the stacks whose preview failed."""
    failed = []
    for stack, result in previews.items():
        if isinstance(result, Exception):
            say(f"Preview of {stack} failed: {_first_line(result)}", "red")
            failed.append(stack)
        else:
            say(f"Preview of {stack}: {describe_changes(summarize_changes(result.change_summary))}.", "bold")
    return failed


def _up_all(steps: list[FleetStep], *, yes: bool, parallel: int, diff: bool, refresh: bool,
            policy_pack: list[Path] | None, as_json: bool, confirm: Callable[[str], bool], what: str) -> bool:
    """Preview (unless --yes), ask once, then `up` each step, `parallel` at a time; True when all succeeded."""
    options = {"parallel": parallel, "diff": diff, "refresh": refresh, "policy_pack": policy_pack, "as_json": as_json}
    if not yes:
        failed = report_previews(run_steps(steps, "preview", **options))
        if failed:
            say("Stopped: a preview failed; nothing was changed.")
            return False
        if not confirm(f"Apply these changes to {what}?"):
            say("Cancelled: nothing was changed.")
            return False
    results = run_steps(steps, "up", **options)
    ok = True
    for step in steps:
        result = results[step.target.stack]
        if isinstance(result, Exception):
            say(f"up of {step.target.stack} failed: {_first_line(result)}", "red")
            ok = False
            continue
        try:
            report_update("up", step.target, result.summary, as_json)
        except typer.Exit:
            ok = False
    return ok


def _first_line(error: BaseException) -> str:
    from aksgpu.cli.workflow.runner import first_error_line

    text = str(error)
    return first_error_line(text) or (text.strip().splitlines()[0] if text.strip() else type(error).__name__)
