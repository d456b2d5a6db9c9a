"""What a stack reads from other stacks in an offline plan: a fleet member's and a fleet's upgrades
stack read the fleet's shared stack through a stack reference, answered from its own offline plan."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from aksgpu.errors import Problem, UserError
from aksgpu.project.stackfile import StackFile, resolve_stack
from aksgpu.stack_config import CLUSTER_KEY, FLEET_KEY, FLEET_UPGRADES_KEY


class _Planned(Protocol):
    outputs: dict[str, Any]


def referenced_stack_outputs(stack_file: StackFile, project: str | None,
                             plan_stack: Callable[[StackFile, str | None, Mapping[str, Mapping[str, Any]]], _Planned],
                             resolve: Callable[[str, Path], StackFile] = resolve_stack) -> dict[str, dict[str, Any]]:
    """The outputs of the stacks `stack_file`'s program reads through stack references, from their
    own offline plans (made with `plan_stack`, the planner's, which calls this: passed in rather than
    imported, so the two modules do not import each other; `resolve` finds that stack's file, by
    default resolve_stack): the fleet stack of a fleet member
    (aksgpu:cluster fleet.stack) or of a fleet's upgrades stack (aksgpu:fleetUpgrades stack).
    UserError when that stack file is missing or holds no fleet."""
    cluster = stack_file.cluster
    fleet = cluster.get("fleet") if isinstance(cluster, dict) else stack_file.fleet_upgrades
    stack = fleet.get("stack") if isinstance(fleet, dict) else None
    if not isinstance(stack, str) or not stack:
        return {}
    key = f"{CLUSTER_KEY}.fleet.stack" if isinstance(cluster, dict) else f"{FLEET_UPGRADES_KEY}.stack"
    try:
        shared = resolve(stack, stack_file.project_dir)
    except UserError as error:
        inner = error.problems[0] if len(error.problems) == 1 else None
        raise UserError(problems=[Problem(
            key, stack, "the fleet stack whose outputs this stack reads through a stack reference: "
            f"{inner.rule if inner else error}", "render the fleet environment (`aksgpu render`), or correct "
            f"{key}", source=stack_file.path.name)]) from None
    if not shared.is_fleet:
        raise UserError(problems=[Problem(key, stack, f"the fleet stack this stack belongs to, but {shared.path.name} "
                                          f"holds no {FLEET_KEY}", "render the fleet environment (`aksgpu render`)",
                                          source=stack_file.path.name)])
    return {stack: plan_stack(shared, project, {}).outputs}
