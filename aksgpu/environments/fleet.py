"""A fleet environment resolved: its shared FleetSpec, its FleetUpgradesSpec and one validated
ClusterSpec per member.

A member's spec is the member's preset (or the environment's), then `defaults.overrides`, the
environment's overrides, the fleet layer (what membership means: the fleet's registry and
workspaces, upgrades left to Fleet Manager, with the policy waivers that says so) and last the
member's own overrides, so a member can still keep its own registry. Rules that span the fleet
(unique names, the stages' groups, upgrades run twice, a pinned version under a version profile,
stack names that clash, shared parts the fleet lacks) are checked here and name the place in
environments.yaml to change. The fleet renders three kinds of stack: shared, one per member, and
the upgrades stack (FleetUpgradesSpec), which deploys after the members.
"""

from __future__ import annotations

import ipaddress
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from aksgpu.environments.file import (
    ENVIRONMENT_NAME,
    UPGRADES,
    Environment,
    EnvironmentsFile,
    FleetMemberSettings,
    FleetSettings,
    member_stack,
)
from aksgpu.environments.effective import HEADER_WIDTH, EffectiveEnvironment, effective_layers, template
from aksgpu.environments.overrides import merge
from aksgpu.environments.stack_text import aksgpu_text, to_yaml, value_digest
from aksgpu.errors import Problem, UserError
from aksgpu.project.generated import stamp, stamp_placeholder
from aksgpu.spec.base import Issue, SpecError, issues_from_validation_error
from aksgpu.spec.fleet import (
    FLEET_CHILD_NAME,
    FLEET_CHILD_NAME_RULE,
    FleetSpec,
    FleetUpgradesSpec,
    parse_fleet_spec,
    parse_fleet_upgrades_spec,
)
from aksgpu.stack_config import DIGEST_KEY, FLEET_KEY, FLEET_UPGRADES_KEY

# An hour to watch each stage's clusters before the next stage starts (the default strategy).
DEFAULT_STAGE_WAIT_SECONDS = 3600
DEFAULT_AUTO_UPGRADE = ({"name": "kubernetes", "channel": "Stable"}, {"name": "node-image", "channel": "NodeImage"})



@dataclass(frozen=True)
class EffectiveFleet:
    """A fleet environment: the shared stack's spec and each member's effective environment."""

    environment: Environment
    spec: FleetSpec
    upgrades: FleetUpgradesSpec
    members: list[EffectiveEnvironment]
    warnings: list[Issue]

    def member(self, name: str) -> EffectiveEnvironment:
        return next(m for m, s in zip(self.members, self.spec.members, strict=True) if s.name == name)


def fleet_has_no_cluster_spec(environments: EnvironmentsFile, name: str) -> UserError:
    """The error for a command that needs one cluster's spec and was given a fleet environment."""
    stacks = [stack for stack, (environment, member) in environments.stacks().items()
              if environment == name and member not in (None, UPGRADES)]
    return UserError(problems=[Problem("STACK argument", name, "the environment is a fleet of clusters, and this "
                                       "command works on one cluster",
                                       f"name one of its member stacks ({', '.join(stacks)}); "
                                       f"`aksgpu plan {name}` shows the whole fleet")])


def is_fleet(environments: EnvironmentsFile, name: str) -> bool:
    settings = environments.document.environments.get(name)
    return settings is not None and settings.fleet is not None


def effective_fleet(environments: EnvironmentsFile, name: str) -> EffectiveFleet:
    """Resolve and validate fleet environment `name`; raises SpecError listing every problem of the
    fleet and its members (each where it was written). Once per `environments` (its document does not
    change): every member's render reads the whole fleet."""
    key = ("effective_fleet", name)
    if key not in environments.worked_out:
        environments.worked_out[key] = _effective_fleet(environments, name)
    found: EffectiveFleet = environments.worked_out[key]
    return found


def _effective_fleet(environments: EnvironmentsFile, name: str) -> EffectiveFleet:
    environment = environments.get(name)
    settings = environment.fleet
    assert settings is not None, f"{name} is not a fleet environment"
    where = f"environments.{name}.fleet"
    source = f"fleet environment {name} ({environments.relative_path})"
    shared, upgrades = _shared_parts(environment, settings, where, source)
    issues = list(_member_names(settings, where))
    if issues:  # every member's spec and stack carries these names
        raise SpecError(issues, source)
    members: list[EffectiveEnvironment] = []
    for member in settings.members:
        try:
            members.append(_effective_member(environments, environment, shared, upgrades, member))
        except SpecError as error:
            issues += error.issues
    if issues:
        raise SpecError(issues, source)
    summaries = [{"name": m.name, "stack": member_stack(name, m.name), "clusterName": e.spec.name,
                  "location": e.spec.location, "group": m.group}
                 for m, e in zip(settings.members, members, strict=True)]
    raw = {**shared.model_dump(mode="json", by_alias=True, exclude={"members"}), "members": summaries}
    if settings.location is None:
        raw["location"] = summaries[0]["location"]
    raw_upgrades = {**upgrades.model_dump(mode="json", by_alias=True, exclude={"members"}), "members": summaries}
    found: list[Issue] = []
    parsed: list[Any] = []
    for parse, value in ((parse_fleet_spec, raw), (parse_fleet_upgrades_spec, raw_upgrades)):
        try:
            spec, warnings = parse(value, source)
        except SpecError as error:
            spec, warnings = None, error.issues
        parsed.append(spec)
        found += [issue for issue in warnings if not _from_members(issue, settings)]
    issues = [*(_at(issue, where) for issue in found),
              *_fleet_rules(environments, environment, settings, raw, upgrades, members)]
    if any(issue.severity == "error" for issue in issues):
        raise SpecError(issues, source)
    return EffectiveFleet(environment, parsed[0], parsed[1], members, issues)


def _shared_parts(environment: Environment, settings: FleetSettings, where: str,
                  source: str) -> tuple[FleetSpec, FleetUpgradesSpec]:
    """The fleet's own fields, validated before any member (members are filled in later)."""
    from pydantic import ValidationError

    common = merge(environment.shared_overrides, environment.overrides)
    fleet_name = settings.name or environment.name
    raw: dict[str, Any] = {
        "name": fleet_name,
        "location": settings.location or "eastus",  # a placeholder until the first member's region is known
        "resourceGroup": settings.resource_group or f"rg-{fleet_name}",
        "tags": settings.tags if settings.tags is not None else common.get("tags", {}),
        "policyOwnedTags": (settings.policy_owned_tags if settings.policy_owned_tags is not None
                            else common.get("policyOwnedTags", [])),
        "protect": settings.protect if settings.protect is not None else common.get("protect", False),
        "hub": settings.hub, "registry": settings.registry, "logAnalytics": settings.log_analytics,
        "prometheus": settings.prometheus, "members": [],
    }
    raw_upgrades: dict[str, Any] = {
        "stack": environment.name,
        "updateStages": settings.update_stages if settings.update_stages is not None else _default_stages(settings),
        "autoUpgrade": settings.auto_upgrade if settings.auto_upgrade is not None else list(DEFAULT_AUTO_UPGRADE),
        "members": [],
    }
    issues: list[Issue] = []
    parsed: list[Any] = []
    for model, value in ((FleetSpec, raw), (FleetUpgradesSpec, raw_upgrades)):
        try:
            parsed.append(model.model_validate(value))
        except ValidationError as error:
            issues += [_at(issue, where) for issue in issues_from_validation_error(error, value, model)]
    if issues:
        raise SpecError(issues, source)
    return parsed[0], parsed[1]


def _member_names(settings: FleetSettings, where: str) -> Iterator[Issue]:
    for index, member in enumerate(settings.members):
        for field, value in (("name", member.name), ("group", member.group)):
            if not FLEET_CHILD_NAME.fullmatch(value):
                yield Issue(f"{where}.members[{index}].{field}", value, FLEET_CHILD_NAME_RULE,
                            'rename it, e.g. "canary"')


def _default_stages(settings: FleetSettings) -> list[dict[str, Any]]:
    groups = list(dict.fromkeys(member.group for member in settings.members))
    return [{"name": group, "groups": [group],
             "afterStageWaitSeconds": DEFAULT_STAGE_WAIT_SECONDS if index < len(groups) - 1 else 0}
            for index, group in enumerate(groups)]


def fleet_layer(shared: FleetSpec, upgrades: FleetUpgradesSpec, environment: str,
                member: FleetMemberSettings) -> dict[str, Any]:
    """What being a member of this fleet sets in a member's spec (before the member's own overrides)."""
    layer: dict[str, Any] = {"fleet": {"stack": environment, "member": member.name, "group": member.group}}
    if shared.registry.mode == "create":
        layer["registry"] = {"mode": "fleet", "publicNetworkAccess": shared.registry.public_network_access}
    monitoring: dict[str, Any] = {}
    if shared.log_analytics.mode != "perMember":
        monitoring["logAnalytics"] = {"mode": "fleet"}
    if shared.prometheus:
        monitoring["prometheusWorkspace"] = "fleet"
    if monitoring:
        layer["monitoring"] = monitoring
    waivers = []
    control_plane: dict[str, Any] = {}
    profiles = ", ".join(f"{p.name} ({p.channel})" for p in upgrades.auto_upgrade if not p.disabled)
    if upgrades.upgrades_kubernetes:
        # Fleet Manager's FAQ: with both on, whichever runs first upgrades the cluster.
        control_plane["upgradeChannel"] = "none"
        waivers.append({"rule": "aks-auto-upgrade", "reason": (
            f"Fleet Manager upgrades this member: fleet {shared.name}'s auto-upgrade profiles {profiles} run "
            "update runs stage by stage, and AKS's own channel is off so the two do not race.")})
    if upgrades.upgrades_node_images:
        control_plane["nodeOsUpgradeChannel"] = "None"
        waivers.append({"rule": "aks-node-os-upgrade", "reason": (
            f"Fleet Manager's NodeImage profile of fleet {shared.name} rolls new node images stage by stage; "
            "AKS's own node OS channel is off so the two do not race.")})
    if control_plane:
        layer["controlPlane"] = control_plane
    if waivers:
        layer["policy"] = {"waivers": waivers}
    return layer


def _effective_member(environments: EnvironmentsFile, environment: Environment, shared: FleetSpec,
                      upgrades: FleetUpgradesSpec, member: FleetMemberSettings) -> EffectiveEnvironment:
    env = environment.name
    layer = fleet_layer(shared, upgrades, env, member)
    stack = member_stack(env, member.name)
    member_environment = replace(
        environment, name=stack, preset=member.preset or environment.preset,
        description=(f"Member {member.name} of fleet environment {env} (update group {member.group})."
                     + (f" {environment.description}" if environment.description else "")),
        overrides=member.overrides,
        shared_overrides=merge(merge(environment.shared_overrides, environment.overrides), layer),
        fleet=None, member_of=env)
    layers = [("defaults.overrides", environment.shared_overrides),
              (f"environments.{env}.overrides", environment.overrides),
              (f"environments.{env}.fleet (what membership sets)", layer),
              (f"environments.{env}.fleet.members[name={member.name}].overrides", member.overrides)]
    return effective_layers(member_environment, layers, f"fleet member {stack}", environments.relative_path)


def _fleet_rules(environments: EnvironmentsFile, environment: Environment, settings: FleetSettings,
                 shared: dict[str, Any], upgrades: FleetUpgradesSpec,
                 members: list[EffectiveEnvironment]) -> list[Issue]:
    issues: list[Issue] = []
    name = environment.name
    where = f"environments.{name}.fleet"
    # Every other stack the file renders, an environment's or another fleet's: one file may not have two owners.
    others = {stack: owner for stack, (owner, _) in environments.stacks().items() if owner != name}
    others.update({env: env for env in environments.names if env != name})
    registry_mode = (shared.get("registry") or {}).get("mode", "create")
    log_mode = (shared.get("logAnalytics") or {}).get("mode", "perRegion")
    for member, effective in zip(settings.members, members, strict=True):
        path = f"{where}.members[name={member.name}]"
        stack = member_stack(name, member.name)
        if member.name == UPGRADES:
            issues.append(Issue(f"{path}.name", member.name, f"{member_stack(name, UPGRADES)} is the fleet's upgrades "
                                "stack", "rename the member"))
        if stack in others:
            issues.append(Issue(f"{path}.name", member.name, f"its stack {stack} is also rendered from environment "
                                f"{others[stack]}, and one would overwrite the other", "rename the member"))
        if not ENVIRONMENT_NAME.fullmatch(stack):
            issues.append(Issue(f"{path}.name", member.name, f"its stack name {stack} is not a valid Pulumi stack "
                                "name (at most 64 characters)", "shorten the member or environment name"))
        spec = effective.spec
        control_plane = spec.control_plane
        if upgrades.upgrades_kubernetes and control_plane.upgrade_channel != "none":
            issues.append(Issue(f"{path}.overrides.controlPlane.upgradeChannel", control_plane.upgrade_channel,
                                "the fleet's auto-upgrade profiles upgrade this member's Kubernetes version, and with "
                                "AKS's own channel on as well, whichever runs first upgrades it, outside the stages",
                                "remove the override (membership sets none), or drop the fleet's Stable/Rapid profile"))
        if upgrades.upgrades_kubernetes and control_plane.kubernetes_version is not None:
            written = next((f"{prefix}.controlPlane.kubernetesVersion" for prefix, layer in (
                (f"{path}.overrides", member.overrides), (f"environments.{name}.overrides", environment.overrides),
                ("defaults.overrides", environment.shared_overrides))
                if "kubernetesVersion" in ((layer or {}).get("controlPlane") or {})), f"{path}.kubernetesVersion")
            issues.append(Issue(written, control_plane.kubernetes_version,
                                "the fleet's Stable/Rapid profile moves the member to newer versions, and the next "
                                "`aksgpu up` would ask AKS to go back to this one (a downgrade AKS refuses)",
                                "remove kubernetesVersion from the fleet's members (its overrides and "
                                "defaults.overrides), or drop the fleet's Stable/Rapid profile"))
        if upgrades.upgrades_node_images and control_plane.node_os_upgrade_channel == "NodeImage":
            issues.append(Issue(f"{path}.overrides.controlPlane.nodeOsUpgradeChannel", "NodeImage",
                                "the fleet's NodeImage profile rolls this member's node images, and AKS's own "
                                "NodeImage channel would roll them too, outside the stages",
                                "remove the override (membership sets None), or drop the fleet's NodeImage profile"))
        for field, mode, provided, part in (
                ("registry.mode", spec.registry.mode, registry_mode == "create", "registry (fleet.registry.mode)"),
                ("monitoring.logAnalytics.mode", spec.monitoring.log_analytics.mode, log_mode != "perMember",
                 "Log Analytics workspaces (fleet.logAnalytics.mode)"),
                ("monitoring.prometheusWorkspace", spec.monitoring.prometheus_workspace,
                 bool(shared.get("prometheus", True)), "Azure Monitor workspace (fleet.prometheus)")):
            if mode == "fleet" and not provided:
                issues.append(Issue(f"{path}.overrides.{field}", "fleet", f"this fleet has no shared {part}",
                                    f"set the member's {field} to its own, or give the fleet one"))
    issues += _overlapping_networks(where, settings, members)
    return issues


def _overlapping_networks(where: str, settings: FleetSettings, members: list[EffectiveEnvironment]) -> list[Issue]:
    """Members whose VNets overlap can never be peered (a hub's multi-cluster load balancing and
    private registry traffic between regions want peered VNets): a warning, since peering is optional."""
    spaces: list[tuple[str, ipaddress.IPv4Network | ipaddress.IPv6Network]] = []
    issues: list[Issue] = []
    for member, effective in zip(settings.members, members, strict=True):
        vnet = effective.spec.network.vnet
        if vnet.mode != "create":
            continue
        for cidr in vnet.address_space:
            network = ipaddress.ip_network(cidr, strict=False)
            for other, other_network in spaces:
                if network.overlaps(other_network):
                    issues.append(Issue(f"{where}.members[name={member.name}].overrides.network.vnet.addressSpace",
                                        cidr, f"overlaps member {other}'s {other_network}, so the two VNets can "
                                        "never be peered", "give each member its own address space", "warning"))
            spaces.append((member.name, network))
    return issues


def _from_members(issue: Issue, settings: FleetSettings) -> bool:
    """A warning about a value the fleet took from its members' specs (their regions; the fleet's
    own, when it names none), which each member's validation has reported where it was written."""
    return issue.severity == "warning" and (issue.path.startswith("members[") or (
        issue.path == "location" and settings.location is None))


def _at(issue: Issue, where: str) -> Issue:
    """A fleet spec's issue at the place in environments.yaml that sets it."""
    return replace(issue, path=f"{where}.{issue.path}" if issue.path != "(top level)" else where)


def render_fleet_text(fleet: EffectiveFleet, environments_file: str, kept_top_level: dict[str, Any],
                      kept_config: dict[str, Any], upgrades: bool = False) -> str:
    """A fleet environment's shared stack file, or with `upgrades` its upgrades stack file
    (deterministic, as render_text)."""
    from aksgpu.spec.base import one_line

    spec = fleet.upgrades if upgrades else fleet.spec
    config = spec.model_dump(mode="json", by_alias=True)
    env = fleet.environment
    member_lines = [f"{member.stack}: cluster {member.cluster_name} in {member.location}, update group {member.group}"
                    for member in fleet.spec.members]
    warnings = [] if upgrades else fleet.warnings
    text = template("fleet_stack.yaml.j2").render(
        environment=env.name,
        stack=member_stack(env.name, UPGRADES) if upgrades else env.name,
        upgrades=upgrades,
        environments_file=environments_file,
        description_lines=[line for paragraph in (env.description or "").splitlines()
                           for line in textwrap.wrap(one_line(paragraph), HEADER_WIDTH - 2) or [""]],
        member_lines=member_lines,
        warnings=warnings,
        warning_lines=[line for warning in warnings
                       for line in textwrap.wrap(one_line(f"- {warning}"), HEADER_WIDTH - 4,
                                                 subsequent_indent="  ", break_on_hyphens=False)],
        stamp_line=stamp_placeholder(),
        kept_top_level=[to_yaml({key: value}) for key, value in kept_top_level.items()],
        spec_key=FLEET_UPGRADES_KEY if upgrades else FLEET_KEY,
        digest_key=DIGEST_KEY,
        fleet_yaml=to_yaml(config),
        value_digest=value_digest(config),
        kept_config=to_yaml(kept_config) if kept_config else "",
    )
    return stamp(text, owned=aksgpu_text)
