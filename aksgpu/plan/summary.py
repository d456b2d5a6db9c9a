"""The plan summary a pull request shows: per environment, what the offline plan creates.

Markdown for a job summary and for one pull-request comment that is updated in place (found by
MARKER). Each environment's part is a list of sections built by SECTION_BUILDERS; a new kind of
finding (cost, policy results) is one more builder, and the layout around it stays the same.
The same plans always give the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from aksgpu.stack_config import CLUSTER_KEY, FLEET_KEY, FLEET_UPGRADES_KEY

if TYPE_CHECKING:
    from aksgpu.plan.review import Review, Stacks
    from aksgpu.preflight.prices import PriceTable
    from aksgpu.project.stackfile import StackFile
    from aksgpu.spec import Issue

MARKER = "<!-- aksgpu:plan-summary -->"


@dataclass(frozen=True)
class EnvironmentResult:
    """What checking one environment found: its plan summary and warnings, or its errors."""

    environment: str
    stack_file: str
    facts: dict[str, Any] | None  # cli.report.summary of the plan; None when the spec has errors
    warnings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # aksgpu's security policies over the plan: counts, what fails, what is only reported.
    policy: dict[str, Any] | None = None
    # The cost estimate (aksgpu.preflight.cost.CostEstimate.json()); None when the spec has errors.
    cost: dict[str, Any] | None = None
    # The deploy-time estimate of a first `pulumi up` (plan.deploy_time.document).
    deploy_time: dict[str, Any] | None = None


@dataclass(frozen=True)
class Section:
    title: str
    lines: list[str]


def _resources(result: EnvironmentResult) -> Section | None:
    facts = result.facts
    if facts is None:
        return None
    rows = [f"| `{type_}` | {count} |" for type_, count in facts["byType"].items()]
    return Section(f"Resources ({facts['resourceCount']})",
                   ["<details><summary>By type</summary>", "", "| type | count |", "| --- | ---: |", *rows, "",
                    "</details>"])


def _pools(result: EnvironmentResult) -> Section | None:
    facts = result.facts
    if facts is None:
        return None
    rows = []
    for pool in facts["pools"]:
        gpus = "?" if pool["gpusPerNode"] is None else str(pool["gpusPerNode"])
        nodes = f"{pool['minNodes']}-{pool['maxNodes']}" if pool["autoscale"] else str(pool["maxNodes"])
        rows.append(f"| `{pool['name']}` | {pool['mode']} | {pool['vmSize']} | {gpus} | "
                    f"{','.join(pool['zones']) or '-'} | {nodes} | {'spot' if pool['spot'] else 'regular'} |")
    gpus = f"{facts['maxGpus']} GPUs" + ("" if facts["gpuCountsComplete"] else " (some sizes unknown)")
    return Section(f"Node pools ({len(facts['pools'])}; at full scale {facts['maxNodes']} nodes, {gpus})",
                   ["| pool | mode | VM size | GPUs/node | zones | nodes | priority |",
                    "| --- | --- | --- | ---: | --- | ---: | --- |", *rows])


def _deploy_time(result: EnvironmentResult) -> Section | None:
    if result.deploy_time is None:
        return None
    from aksgpu.plan.deploy_time import summary_line

    return Section("Deploy time (estimate)", [_escape(summary_line(result.deploy_time))])


def _warnings(result: EnvironmentResult) -> Section | None:
    if not result.warnings:
        return None
    return Section(f"Warnings ({len(result.warnings)})", [f"- {_escape(warning)}" for warning in result.warnings])


def _errors(result: EnvironmentResult) -> Section | None:
    if not result.errors:
        return None
    return Section(f"Errors ({len(result.errors)})", [f"- {_escape(error)}" for error in result.errors])


def _notes(result: EnvironmentResult) -> Section | None:
    if not result.notes:
        return None
    return Section("Notes", [f"- {_escape(note)}" for note in result.notes])


def _policy(result: EnvironmentResult) -> Section | None:
    policy = result.policy
    if policy is None:
        return None
    counts = policy["counts"]
    lines = [f"{counts['rules']} rules: {counts['failing']} failing, {counts['advisory']} advisory, "
             f"{counts['waived']} waived (`aksgpu policy list` explains each rule)."]
    if policy["problems"] or policy["notes"]:
        lines.append("")
    lines += [f"- ❌ {_escape(line)}" for line in policy["problems"]]
    lines += [f"- {_escape(line)}" for line in policy["notes"]]
    return Section("Security policies", lines)


def _cost(result: EnvironmentResult) -> Section | None:
    if result.cost is None:
        return None
    from aksgpu.preflight.cost_report import markdown_lines

    return Section("Cost estimate (`aksgpu cost` lists what is assumed and not estimated)", markdown_lines(result.cost))


# Later findings are added here, in the order they should appear.
SECTION_BUILDERS: tuple[Callable[[EnvironmentResult], Section | None], ...] = (
    _errors, _notes, _policy, _pools, _cost, _deploy_time, _resources, _warnings,
)


def _escape(text: str) -> str:
    """User values in list items: no HTML, no accidental markdown tables."""
    return text.replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")


def _status(result: EnvironmentResult) -> str:
    if result.errors:
        return "❌ invalid"
    if result.policy is not None and result.policy["problems"]:
        count = len(result.policy["problems"])
        return f"❌ {count} policy finding{'' if count == 1 else 's'}"
    if result.warnings:
        count = len(result.warnings)
        return f"⚠️ {count} warning{'' if count == 1 else 's'}"
    return "✅ valid"


def summary_markdown(results: list[EnvironmentResult], *, commit: str | None = None) -> str:
    """The whole summary: an overview table, then one part per environment."""
    lines = [MARKER, "## aksgpu plan", ""]
    lines.append("Offline plans of every environment (`aksgpu plan`): nothing was sent to Azure."
                 + (f" Commit `{commit}`." if commit else ""))
    lines += ["", "| environment | status | resources | pools | max nodes | max GPUs |",
              "| --- | --- | ---: | ---: | ---: | ---: |"]
    for result in results:
        facts = result.facts or {}
        lines.append(f"| `{result.environment}` | {_status(result)} | {facts.get('resourceCount', '-')} | "
                     f"{len(facts.get('pools', [])) if facts else '-'} | {facts.get('maxNodes', '-')} | "
                     f"{facts.get('maxGpus', '-')} |")
    for result in results:
        lines += ["", f"### `{result.environment}` ({result.stack_file})"]
        for builder in SECTION_BUILDERS:
            section = builder(result)
            if section is not None:
                lines += ["", f"**{section.title}**", "", *section.lines]
    return "\n".join(lines) + "\n"


def _fleet_result(name: str, stack_name: str, stack_file: StackFile, notes: list[str], prices: PriceTable,
                  stacks: Stacks) -> EnvironmentResult:
    """A fleet's shared stack (its plan, policies and the cost of the shared parts) or upgrades stack
    (no cost: Fleet Manager's update strategies and profiles are free)."""
    from aksgpu.plan.review import review
    from aksgpu.spec.fleet import FleetSpec, FleetUpgradesSpec, parse_fleet_spec, parse_fleet_upgrades_spec

    spec: FleetSpec | FleetUpgradesSpec
    if stack_file.is_fleet_upgrades:
        spec, warnings = parse_fleet_upgrades_spec(stack_file.fleet_upgrades,
                                                   source=stack_file.source(FLEET_UPGRADES_KEY))
    else:
        spec, warnings = parse_fleet_spec(stack_file.fleet, source=stack_file.source(FLEET_KEY))
    return _result(name, stack_name, review(stacks.plan(stack_file), spec, prices=prices), warnings, notes)


def _result(name: str, stack_name: str, found: Review, warnings: list[Issue], notes: list[str]) -> EnvironmentResult:
    """An environment's part of the summary from its plan's review (plan/review.py)."""
    from aksgpu.plan.report import summary

    cost = None if found.cost is None else found.cost.json()
    return EnvironmentResult(name, stack_name, summary(found.plan), [str(w) for w in warnings], notes=notes,
                             policy=found.policy_document(), cost=cost, deploy_time=found.deploy_time_document())


def check_environments(names: list[str] | None = None,
                       progress: Callable[[int, int], None] | None = None) -> list[EnvironmentResult]:
    """Validate and plan each environment's stack file (every environment when `names` is empty); the
    stack files are planned ahead on the machine's cores (`progress(done, total)` as plans finish)."""
    from aksgpu.environments.file import load_environments
    from aksgpu.environments.render import plan_render
    from aksgpu.environments.replacement import system_pool_note
    from aksgpu.errors import MISSING, Problem, UserError
    from aksgpu.plan.review import Stacks, review
    from aksgpu.preflight.tables import price_table
    from aksgpu.spec import SpecError, parse_cluster_spec

    environments = load_environments()
    environments.require(names or [])  # an unknown name is bad input (exit 2)
    if not (names or environments.names):
        raise UserError(problems=[Problem("environments", MISSING, "the file defines no environments, so there "
                                          "is nothing to plan", "add one with `aksgpu init ENV --preset NAME`",
                                          source=environments.relative_path)])
    prices = price_table(environments.project_dir)
    planned = Stacks()  # a fleet's shared stack is resolved and planned once for all its members
    results = []
    stacks = environments.stacks()
    wanted = names or environments.names
    # A fleet environment: its shared stack, then each member's; a member's stack: that one.
    checked = [stack for stack, (environment, _) in stacks.items() if stack in wanted or environment in wanted]
    planned.plan_ahead(_stack_files(planned, checked, environments.project_dir), progress=progress)
    for name in checked:
        stack_name = f"stacks/Pulumi.{name}.yaml"
        notes: list[str] = []
        try:
            rendered = plan_render(environments, name)
            if rendered.state != "current":
                notes.append(f"{stack_name} is not what `aksgpu render {name}` writes ({rendered.state}); "
                             "the plan below is of the stack file as committed.")
            if rendered.refusal():
                notes.append(rendered.refusal())
            if rendered.impact.not_applied:
                notes.append(system_pool_note(name, rendered.impact.not_applied))
            stack_file = planned.resolve(name, environments.project_dir)
            stack_name = str(stack_file.path.relative_to(stack_file.project_dir))
            if stack_file.is_fleet or stack_file.is_fleet_upgrades:
                results.append(_fleet_result(name, stack_name, stack_file, notes, prices, planned))
                continue
            spec, warnings = parse_cluster_spec(stack_file.cluster, source=stack_file.source(CLUSTER_KEY))
        except SpecError as error:
            results.append(EnvironmentResult(name, stack_name, None, errors=[str(i) for i in error.errors],
                                             notes=notes))
            continue
        except UserError as error:
            results.append(EnvironmentResult(name, stack_name, None, errors=[str(error)], notes=notes))
            continue
        found = review(planned.plan(stack_file), spec, prices=prices)
        results.append(_result(name, stack_name, found, warnings, notes))
    return results


def _stack_files(planned: Stacks, names: list[str], project_dir: Any) -> list[StackFile]:
    """The stack files of `names` that resolve (the others are reported when their turn comes)."""
    from aksgpu.errors import UserError

    found = []
    for name in names:
        try:
            found.append(planned.resolve(name, project_dir))
        except UserError:
            continue
    return found
