"""`aksgpu up FLEET`: a fleet's shared stack, then its members in parallel, then its upgrades stack.

Members read the shared stack's outputs through a stack reference, so the shared stack goes first;
the members then deploy side by side (different resource groups, no shared Azure operation), at
most `parallel` at a time; the upgrades stack (update strategy, auto-upgrade profiles) goes last,
since Fleet Manager takes only groups that members have joined. Each step previews and asks first
unless --yes; one member's failure does not stop the others, and the command then exits 1 naming
every member that failed (the upgrades stack then waits).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from aksgpu.cli.console import say
from aksgpu.environments.file import UPGRADES
from aksgpu.errors import Problem, UserError
from aksgpu.errors import EXIT_FAILED
from aksgpu.project.stackfile import StackFile, resolve_stack
from aksgpu.cli.workflow.runner import (
    EngineOutput,
    describe_changes,
    open_stack,
    policy_options,
    policy_packs,
    report_update,
    require_confirmable,
    require_ready,
    require_rendered,
    summarize_changes,
    validate_spec,
)
from aksgpu.workflow.target import Target, target_for


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
                secrets_provider: str | None, env: dict[str, str]) -> tuple[FleetStep, list[FleetStep], FleetStep]:
    """The shared stack's step, the members' (all, or those named by member name or stack) and the
    upgrades stack's."""
    from aksgpu.spec.fleet import FleetSpec

    spec = validate_spec(shared)
    assert isinstance(spec, FleetSpec)
    known = {member.name: member.stack for member in spec.members}
    wanted = list(members or [])
    unknown = [name for name in wanted if name not in known and name not in known.values()]
    if unknown:
        raise UserError(problems=[Problem("--member", name, f"not a member of fleet {shared.stack}",
                                          f"use some of: {', '.join(known)}") for name in unknown],
                        source="the command line")
    steps = []
    for name, stack in known.items():
        if wanted and name not in wanted and stack not in wanted:
            continue
        member_file = resolve_stack(stack, cwd=shared.project_dir)
        steps.append(FleetStep(member_file, _target(member_file, backend, secrets_provider, env),
                               validate_spec(member_file)))
    upgrades_file = resolve_stack(f"{shared.stack}-{UPGRADES}", cwd=shared.project_dir)
    upgrades = FleetStep(upgrades_file, _target(upgrades_file, backend, secrets_provider, env),
                         validate_spec(upgrades_file))
    return FleetStep(shared, _target(shared, backend, secrets_provider, env), spec), steps, upgrades


def _target(stack_file: StackFile, backend: str | None, secrets_provider: str | None,
            env: dict[str, str]) -> Target:
    return target_for(stack_file, backend_flag=backend, secrets_provider_flag=secrets_provider, env=env)


def up_fleet(shared: FleetStep, members: list[FleetStep], upgrades: FleetStep | None, *, yes: bool, parallel: int,
             diff: bool, refresh: bool, policy_pack: list[Path] | None, as_json: bool,
             confirm: Callable[[str], bool] | None = None) -> None:
    """Deploy the shared stack, then the members, then (when given) the upgrades stack; raises
    typer.Exit(1) when anything failed or was declined."""
    confirm = confirm or (lambda question: typer.confirm(question, default=False, err=True))
    last = [upgrades] if upgrades is not None else []
    for step in [shared, *members, *last]:
        require_rendered("up", step.stack_file)
        require_ready("up", step.stack_file, step.target, needs_azure=True)
    then = f", then {upgrades.target.stack}" if upgrades is not None else ""
    say(f"aksgpu up {shared.target.stack}: the shared stack, then {len(members)} member(s), at most {parallel} "
        f"at a time{then}.", "bold")
    options: dict[str, Any] = {"yes": yes, "diff": diff, "refresh": refresh, "policy_pack": policy_pack,
                               "as_json": as_json, "confirm": confirm}
    if not _up_all([shared], parallel=1, what=f"the fleet's shared stack {shared.target.stack}", **options):
        raise typer.Exit(EXIT_FAILED)
    if members and not _up_all(members, parallel=parallel, what=f"{len(members)} member stack(s)", **options):
        raise typer.Exit(EXIT_FAILED)
    if upgrades is not None and not _up_all([upgrades], parallel=1, what=f"the fleet's upgrades stack "
                                            f"{upgrades.target.stack}", **options):
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
    options: dict[str, Any] = {"parallel": parallel, "diff": diff, "refresh": refresh, "policy_pack": policy_pack,
                               "as_json": as_json}
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


def up_whole_fleet(stack_file: StackFile, *, member: list[str] | None, parallel: int, yes: bool, diff: bool,
                   refresh: bool, only_shared: bool, policy_pack: list[Path] | None, as_json: bool,
                   backend: str | None, secrets_provider: str | None) -> None:
    """`aksgpu up FLEET`: shared stack, members (all or --member), then the upgrades stack."""
    policy_packs(policy_pack)
    if not yes:
        require_confirmable("up", stack_file.stack)
    if only_shared and member:
        raise UserError(problems=[Problem("--member", member, "--no-members deploys the shared stack alone, and "
                                          "--member names members to deploy", "drop one of them")])
    shared, members, upgrades = fleet_steps(stack_file, member, backend=backend, secrets_provider=secrets_provider,
                                            env=dict(os.environ))
    if only_shared:
        members = []
    # The upgrades stack names every member's group: it follows a deploy of all of them (or run it on its own).
    up_fleet(shared, members, None if only_shared or member else upgrades, yes=yes, parallel=parallel, diff=diff,
             refresh=refresh, policy_pack=policy_pack, as_json=as_json)


def refuse_a_fleet_with_members(stack_file: StackFile) -> None:
    """A fleet's shared stack goes last: its members use its registry and workspaces, and the
    upgrades stack names their groups."""
    if not stack_file.is_fleet:
        return
    fleet = stack_file.fleet if isinstance(stack_file.fleet, dict) else {}
    names = [m.get("stack") for m in fleet.get("members") or [] if isinstance(m, dict)]
    folder = stack_file.path.parent
    left = [stack for stack in [f"{stack_file.stack}-{UPGRADES}", *names]
            if isinstance(stack, str) and (folder / f"Pulumi.{stack}.yaml").is_file()]
    if left:
        raise UserError(f"stack {stack_file.stack} is a fleet's shared stack, and {', '.join(left)} still have stack "
                        "files: their stacks use its registry and workspaces and its fleet. Fix: destroy them first, "
                        f"{left[0]} then the members (`aksgpu destroy STACK` each), remove them from the fleet in "
                        f"stacks/environments.yaml and delete their stack files, then destroy {stack_file.stack}.")
