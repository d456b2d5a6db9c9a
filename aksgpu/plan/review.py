"""One review of an offline plan (DESIGN.md: review(plan) = policy + cost + deploy time).

`review(plan, spec)` is what every command that shows a plan's findings reports: aksgpu's security
policies over the plan's resources (a cluster's with its waivers; a fleet's shared and upgrades
stacks have none), the cost estimate (a cluster's, or a fleet's shared parts; a fleet's upgrades
stack costs nothing) and the deploy-time estimate of a first `pulumi up`. `aksgpu plan`, a fleet's
plan (plan/fleet.py), the pull-request summary (plan/summary.py) and `aksgpu validate`
(`check_policies`) all review here. The cost and the deploy time are worked out when first read, so
a command that shows only the policies (`aksgpu validate`) does not read the price table.

`Stacks` is one command's stack files and plans: each stack file is resolved once and each stack
planned once, however many stacks read it (every member of a fleet reads its shared stack's outputs
through a stack reference).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from datetime import date
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aksgpu.plan.planner import Plan, plan_stack
from aksgpu.plan.policy_results import evaluate_resources
from aksgpu.plan.references import referenced_stack_outputs
from aksgpu.project.stackfile import StackFile, resolve_stack
from aksgpu.spec import ClusterSpec
from aksgpu.spec.fleet import FleetSpec, FleetUpgradesSpec

if TYPE_CHECKING:
    from aksgpu.environments.validation import Report
    from aksgpu.plan.workers import Job, Progress
    from aksgpu.policy.engine import PolicyReport
    from aksgpu.preflight.cost import CostEstimate
    from aksgpu.plan.deploy_time import DeployTime
    from aksgpu.preflight.prices import PriceTable


class Review:
    """A plan's policy report, cost estimate and deploy-time estimate."""

    def __init__(self, plan: Plan, spec: ClusterSpec | FleetSpec | FleetUpgradesSpec, *,
                 prices: PriceTable | None = None, project_dir: Path | None = None, today: date | None = None):
        self.plan = plan
        self.spec = spec
        self._prices = prices
        self._project_dir = project_dir
        waivers = spec.policy.waivers if isinstance(spec, ClusterSpec) else []
        self.policy: PolicyReport = evaluate_resources(plan, waivers, today)

    @property
    def failed(self) -> bool:
        """A mandatory policy finding is not waived."""
        return self.policy.failed

    @cached_property
    def cost(self) -> CostEstimate | None:
        """The monthly cost estimate (`aksgpu cost`), from the project's price table or aksgpu's;
        None for a fleet's upgrades stack (Fleet Manager's update strategies and profiles are free).
        UserError when the project's price table is broken."""
        from aksgpu.preflight.cost import estimate, fleet_estimate
        from aksgpu.preflight.tables import price_table

        if isinstance(self.spec, FleetUpgradesSpec):
            return None
        prices = self._prices if self._prices is not None else price_table(self._project_dir)
        return fleet_estimate(self.spec, prices) if isinstance(self.spec, FleetSpec) else estimate(self.spec, prices)

    @cached_property
    def deploy_time(self) -> DeployTime:
        """The deploy-time estimate of a first `pulumi up` (plan/deploy_time.py)."""
        from aksgpu.plan import deploy_time

        return deploy_time.estimate(self.plan)

    def deploy_time_document(self) -> dict[str, Any]:
        from aksgpu.plan import deploy_time

        return deploy_time.document(self.deploy_time)

    def policy_document(self) -> dict[str, Any]:
        """The policy part of the pull-request summary: counts, what fails, what is only reported."""
        return {"counts": self.policy.counts(), "problems": self.policy.problems(), "notes": self.policy.notes()}


def review(plan: Plan, spec: ClusterSpec | FleetSpec | FleetUpgradesSpec, *, prices: PriceTable | None = None,
           project_dir: Path | None = None, today: date | None = None) -> Review:
    """Review `plan`, made from `spec`: the policies now; the cost (from `prices`, else the price table
    of the project at `project_dir`, else aksgpu's) and the deploy time when first read."""
    return Review(plan, spec, prices=prices, project_dir=project_dir, today=today)


class Stacks:
    """The stack files and offline plans of one command, each resolved and planned once."""

    def __init__(self) -> None:
        self._files: dict[tuple[Path, str], StackFile] = {}
        self._plans: dict[tuple[Path, str | None], Plan] = {}

    def resolve(self, target: str, cwd: Path | None = None) -> StackFile:
        """project.stackfile.resolve_stack, once per target and folder."""
        key = ((cwd or Path.cwd()).resolve(), target)
        if key not in self._files:
            self._files[key] = resolve_stack(target, cwd)
        return self._files[key]

    def plan(self, stack_file: StackFile, project: str | None = None,
             stack_outputs: Mapping[str, Mapping[str, Any]] | None = None) -> Plan:
        """planner.plan_stack, once per stack file: the stacks it reads through stack references are
        resolved and planned through this object too (`stack_outputs` as plan_stack's, on the first
        plan of the stack)."""
        key = (stack_file.path, project)
        if key not in self._plans:
            if stack_outputs is None:
                stack_outputs = referenced_stack_outputs(stack_file, project, self.plan, resolve=self.resolve)
            self._plans[key] = plan_stack(stack_file, project, stack_outputs)
        return self._plans[key]

    def plan_ahead(self, stack_files: Sequence[StackFile], project: str | None = None, *,
                   shared: StackFile | None = None, progress: Progress | None = None) -> None:
        """Plan `stack_files` and the stacks they read through stack references on the machine's cores
        (plan/workers.py), ahead of `plan`, which then finds each plan made: the plans `plan` would make
        one after another, each stack's from the first stack file of its path, as `plan` keeps it.
        `shared`: the fleet stack whose outputs every one of them reads under its stack name (a fleet's
        plan), rather than the one each names. Raises nothing but KeyboardInterrupt: a stack that cannot
        be planned is left to `plan`, which raises its error as it would have."""
        from aksgpu.errors import UserError
        from aksgpu.plan.workers import plan_ahead

        index: dict[tuple[Path, str | None], int] = {}
        keys: list[tuple[Path, str | None]] = []
        jobs: list[Job | Any] = []
        after: list[int | None] = []

        def add(stack_file: StackFile, job: Any, before: int | None) -> int:
            index[(stack_file.path, project)] = len(jobs)
            keys.append((stack_file.path, project))
            jobs.append(job)
            after.append(before)
            return len(jobs) - 1

        def reading(stack_file: StackFile, reads: StackFile | None) -> Any:
            if reads is None:
                return (stack_file, project, {})
            if shared is not None:
                return lambda: (stack_file, project, {shared.stack: self._plans[(shared.path, project)].outputs})
            return lambda: (stack_file, project, referenced_stack_outputs(stack_file, project, self.plan,
                                                                          resolve=self.resolve))

        for stack_file in stack_files:
            if (stack_file.path, project) in self._plans or (stack_file.path, project) in index:
                continue
            reads: list[StackFile] = [shared] if shared is not None else []
            if shared is None:
                try:  # the stack it reads, found as `plan` finds it (planned with no outputs of its own)
                    referenced_stack_outputs(stack_file, project, _Found(reads), resolve=self.resolve)
                except UserError:
                    continue
            before = None
            if reads:
                key = (reads[0].path, project)
                if key not in self._plans and key not in index:
                    add(reads[0], (reads[0], project, {}), None)
                before = index.get(key)
            job = reading(stack_file, reads[0] if reads else None)
            add(stack_file, job() if callable(job) and before is None else job, before)

        def keep(position: int, plan: Plan) -> None:
            self._plans.setdefault(keys[position], plan)

        plan_ahead(jobs, after, keep, progress)


class _Found:
    """A stand-in planner that notes the stack file it is asked to plan (the stack a stack reads)."""

    def __init__(self, found: list[StackFile]) -> None:
        self.found = found

    def __call__(self, stack_file: StackFile, *_: Any) -> Any:
        self.found.append(stack_file)
        return SimpleNamespace(outputs={})


def check_policies(report: Report, stacks: Stacks | None = None) -> None:
    """The security policies over a valid validation target's offline plan, with its waivers: the
    findings go into the report (`aksgpu validate` without --spec-only). Pass one `stacks` for every
    target, so a fleet's shared stack is planned once for all its members."""
    if report.planned is None or report.errors:
        return
    stack_file, spec = report.planned
    found = review((stacks or Stacks()).plan(stack_file), spec)
    report.policy_problems = found.policy.problems()
    report.policy_notes = found.policy.notes()
