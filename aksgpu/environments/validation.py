"""`aksgpu validate`: environments and stack files against every spec rule, all problems at once."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aksgpu.environments.file import EnvironmentsFile, load_environments
from aksgpu.environments.global_names import GlobalName, fleet_global_names, global_names
from aksgpu.errors import MISSING, Problem, UserError
from aksgpu.project.stackfile import StackFile, find_project_dir, resolve_stack
from aksgpu.project.yaml_input import parse_yaml
from aksgpu.spec import ClusterSpec
from aksgpu.spec.base import Issue, render_value
from aksgpu.stack_config import CLUSTER_KEY, FLEET_KEY, FLEET_UPGRADES_KEY


@dataclass
class Report:
    """What validation found for one environment or stack file."""

    target: str
    source: str
    issues: list[Issue] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # problems that are not spec rules (files, drift)
    failed: bool = False  # a problem outside the spec (unreadable file) made it invalid
    cluster: tuple[str, str] | None = None  # (resource group, cluster name) of a valid environment
    # What the security policies need: the stack to plan offline and its spec (None: invalid).
    planned: tuple[StackFile, ClusterSpec] | None = None
    # The names it asks Azure for that are unique across Azure (a cluster's or a fleet's).
    global_names: list[GlobalName] = field(default_factory=list)
    policy_problems: list[str] = field(default_factory=list)  # failing policy findings, expired waivers
    policy_notes: list[str] = field(default_factory=list)  # advisory findings, unused waivers

    @property
    def errors(self) -> list[Issue | str]:
        found: list[Issue | str] = [i for i in self.issues if i.severity == "error"]
        if self.failed:
            found += [note for note in self.notes if note.startswith("error")]
        return found + list(self.policy_problems)

    @property
    def warnings(self) -> list[Issue]:
        return [issue for issue in self.issues if issue.severity == "warning"]

    def text(self) -> str:
        lines: list[str] = []
        spec_errors = [i for i in self.issues if i.severity == "error"]
        if spec_errors:
            noun = "problem" if len(spec_errors) == 1 else "problems"
            lines.append(f"{self.source} has {len(spec_errors)} {noun}:")
            lines += [f"  - {issue}" for issue in spec_errors]
        lines += self.notes
        lines += [f"error: policy {problem}" for problem in self.policy_problems]
        lines += [f"note: policy {note}" for note in self.policy_notes]
        lines += [f"warning: {issue}" for issue in self.warnings]
        errors = len(self.errors)
        counts = _count(len(self.warnings), "warning") + (f", {_count(errors, 'error')}" if errors else "")
        lines.append(f"{self.target}: {'valid' if not errors else 'invalid'} ({counts})")
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "valid": not self.errors,
            "problems": [_issue_json(i) for i in self.issues],
            "notes": self.notes,
            "policyProblems": self.policy_problems,
            "policyNotes": self.policy_notes,
        }


def _issue_json(issue: Issue) -> dict[str, Any]:
    return {"path": issue.path, "value": render_value(issue.value), "rule": issue.rule, "fix": issue.fix,
            "severity": issue.severity}


def validate_targets(targets: list[str], cwd: Path | None = None) -> list[Report]:
    """Reports for `targets` (environment names or stack file paths); none: everything. The security
    policies over each valid target's offline plan are aksgpu.plan's (review.check_policies)."""
    project_dir = find_project_dir((cwd or Path.cwd()).resolve())
    environments = load_environments(project_dir)
    if environments.exists and not environments.names:
        raise UserError(problems=[Problem("environments", MISSING, "the file defines no environments",
                                          "add one under environments: (or with `aksgpu init dev --preset dev`), or "
                                          "delete the file if you keep only stack files",
                                          source=environments.relative_path)])
    for target in targets:
        if target not in environments.names:
            resolve_stack(target, cwd)  # a name that is neither is bad input: UserError, exit 2
    if not targets:
        targets = list(environments.names)
        stacks_dir = environments.path.parent
        rendered = {f"Pulumi.{name}.yaml" for name in environments.names}
        targets += [str(path.relative_to(project_dir)) for path in sorted(stacks_dir.glob("Pulumi.*.yaml"))
                    if path.name not in rendered]
        if not targets:
            raise UserError("nothing to validate: no environments and no stack files. "
                            "Fix: add one with `aksgpu init dev --preset dev`.")
    rendered_here: set[Path] = set()  # the stack files this command rendered (a fleet's: all its members')
    reports = [_validate_one(target, environments, cwd, rendered_here) for target in targets]
    _note_shared_clusters(reports)
    _note_shared_global_names(reports)
    return reports


def _note_shared_global_names(reports: list[Report]) -> None:
    """Warn when two environments (clusters or fleets) ask Azure for the same registry or vault name:
    those names are unique across all of Azure (catalog/azure_names.yaml, scope global), so the
    second `up` fails."""
    claimed: dict[tuple[str, str], list[tuple[Report, str]]] = {}
    for report in reports:
        for label, name, setting in report.global_names:
            claimed.setdefault((label, name.casefold()), []).append((report, setting))
    for (label, name), sharing in claimed.items():
        if len({id(report) for report, _ in sharing}) < 2:
            continue
        for report, setting in sharing[1:]:
            others = ", ".join(other.target for other, _ in sharing if other is not report)
            report.notes.append(
                f"warning: {report.target} asks Azure for the {label} name {name}, as {others} does; it is unique "
                f"across Azure, so the second `aksgpu up` fails. Fix: set {setting} in one of them to a name of its "
                "own.")


def _note_shared_clusters(reports: list[Report]) -> None:
    """Warn when two environments declare the same cluster (resource group and name): in one
    subscription, two Pulumi stacks would then manage one cluster and undo each other."""
    declared: dict[tuple[str, str], list[Report]] = {}
    for report in reports:
        if report.cluster is not None:
            group, cluster = report.cluster
            declared.setdefault((group.casefold(), cluster.casefold()), []).append(report)
    for (group, cluster), sharing in declared.items():
        for report in sharing[1:]:
            name = report.target.removeprefix("environment ")
            others = ", ".join(other.target.removeprefix("environment ") for other in sharing if other is not report)
            report.notes.append(
                f"warning: environment {name} declares cluster {cluster} in resource group {group}, as {others} does; "
                "in one subscription two stacks would manage one cluster and undo each other's changes. Fix: give "
                "each environment its own name or resourceGroup.name (or subscriptions you keep apart).")


def _validate_one(target: str, environments: EnvironmentsFile, cwd: Path | None, rendered_here: set[Path]) -> Report:
    if target in environments.names:
        return _validate_environment(target, environments, rendered_here)
    return _validate_stack_file(target, cwd, environments, rendered_here)


def _validate_environment(name: str, environments: EnvironmentsFile, rendered_here: set[Path]) -> Report:
    from aksgpu.environments.render import plan_renders
    from aksgpu.spec import SpecError

    report = Report(f"environment {name}", f"environment {name}")
    try:
        renders = plan_renders(environments, name)  # validates the environment's spec on the way
        rendered = renders[0]
        rendered_here.update(other.path.resolve() for other in renders)
    except SpecError as error:
        report.source = error.source or report.source
        report.issues = list(error.issues)
        return report
    except UserError as error:
        report.notes.append(f"error: {error}")
        report.failed = True
        return report
    report.issues = list(rendered.warnings)
    if rendered.spec is not None:
        report.cluster = (rendered.spec.resource_group.name, rendered.spec.name)
        # The environment as environments.yaml defines it: the config render would write.
        config = parse_yaml(rendered.text).get("config", {})
        report.planned = (StackFile(environments.project_dir, rendered.path, name, config), rendered.spec)
        report.global_names = global_names(rendered.spec)
    else:  # a fleet environment's shared stack: its registry's name, as render writes it
        report.global_names = _fleet_names(parse_yaml(rendered.text).get("config", {}).get(FLEET_KEY))
    stack = rendered.path.relative_to(environments.project_dir)
    if rendered.state == "new":
        report.notes.append(f"note: {stack} is not rendered yet. Fix: run `aksgpu render {name}`.")
    elif rendered.state == "hand-edited":
        report.notes.append(f"note: {stack} was edited by hand ({rendered.reason}); Pulumi uses that file, not "
                            f"environments.yaml. Fix: move the change into environments.yaml and "
                            f"`aksgpu render {name} --force`.")
        stack_report = _validate_stack_file(str(rendered.path), None)
        report.issues += [i for i in stack_report.issues if i.severity == "error"]
        report.notes += stack_report.notes
        report.failed = report.failed or stack_report.failed
    elif rendered.state == "stale":
        report.notes.append(f"note: {stack} is out of date with {environments.relative_path}. "
                            f"Fix: run `aksgpu render {name}`.")
    return report


def _validate_stack_file(target: str, cwd: Path | None, environments: EnvironmentsFile | None = None,
                         rendered_here: set[Path] | None = None) -> Report:
    from aksgpu.spec import SpecError, parse_cluster_spec

    try:
        stack_file = resolve_stack(target, cwd)
    except UserError as error:
        report = Report(target, target, notes=[f"error: {error}"], failed=True)
        return report
    if stack_file.is_fleet or stack_file.is_fleet_upgrades:  # members are validated as their own stacks
        from aksgpu.spec.fleet import parse_fleet_spec, parse_fleet_upgrades_spec

        key, raw, parse = ((FLEET_KEY, stack_file.fleet, parse_fleet_spec) if stack_file.is_fleet else
                           (FLEET_UPGRADES_KEY, stack_file.fleet_upgrades, parse_fleet_upgrades_spec))
        report = Report(stack_file.path.name, stack_file.source(key))
        try:
            report.issues = list(parse(raw, source=report.source)[1])
        except SpecError as error:
            report.issues = list(error.issues)
        if stack_file.is_fleet and not report.errors:
            report.global_names = _fleet_names(raw)
        return report
    source = stack_file.source(CLUSTER_KEY)
    report = Report(stack_file.path.name, source)
    cluster = stack_file.cluster
    rendered = rendered_here is not None and stack_file.path.resolve() in rendered_here
    if isinstance(cluster, dict) and isinstance(cluster.get("fleet"), dict) and not rendered:
        # A fleet member's stack file: its fleet must still list it (render_state says how to part),
        # unless this command rendered it already, with its fleet: then it does.
        from aksgpu.environments.render import EnvironmentNotRendered, render_state

        try:
            render_state(stack_file, environments)  # the project's environments, read once for every target
        except EnvironmentNotRendered as error:
            report.notes.append(f"error: {error}")
            report.failed = True
            return report
    try:
        spec, warnings = parse_cluster_spec(stack_file.cluster, source=source)
    except SpecError as error:
        report.issues = list(error.issues)
        return report
    report.issues = list(warnings)
    report.planned = (stack_file, spec)
    report.global_names = global_names(spec)
    return report


def _fleet_names(raw: Any) -> list[GlobalName]:
    """The global names of a fleet's shared stack (its `aksgpu:fleet` value, valid)."""
    from aksgpu.spec.fleet import parse_fleet_spec

    return fleet_global_names(parse_fleet_spec(raw)[0])


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")
