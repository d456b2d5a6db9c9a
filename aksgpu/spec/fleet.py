"""FleetSpec and FleetUpgradesSpec: many AKS GPU clusters declared together and operated as one.

A fleet environment renders one Pulumi stack for its shared parts (`aksgpu:fleet`, this
module's FleetSpec), one per member cluster (`aksgpu:cluster`, a ClusterSpec whose `fleet`
field is the member's FleetMembership) and one for its upgrades (`aksgpu:fleetUpgrades`,
FleetUpgradesSpec). The shared stack holds the Azure Kubernetes Fleet Manager fleet and the parts
every member uses: a geo-replicated registry, Log Analytics workspaces and one Azure Monitor
workspace. A member stack holds its cluster and its FleetMember. The upgrades stack holds the
staged update strategy and the auto-upgrade profiles, which may name only groups that members
have joined. Both read the shared stack's outputs through a stack reference: shared stack first,
then the members, then the upgrades.

Names and limits follow Fleet Manager's OpenAPI spec 2024-05-02-preview (the version
pulumi-azure-native 3.x uses; tests/data/azure-rest-api/.../fleet) and its docs (data table
aks_limits.yaml, fleet entries).
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError

from aksgpu import catalog

from aksgpu.spec import names
from aksgpu.spec.names import global_suffix, suffixed_registry
from aksgpu.spec.pool_checks import check_system_vm_size
from aksgpu.spec.pools import SystemPool
from aksgpu.spec.shared_fields import (
    ClusterName,
    DnsPrefix,
    Location,
    ResourceGroupName,
    StackName,
    check_location,
)
from aksgpu.spec.base import (
    Issue,
    SpecError,
    SpecModel,
    check_policy_owned_tags,
    check_tags,
    checked,
    issues_from_validation_error,
)
from aksgpu.stack_config import FLEET_KEY, FLEET_UPGRADES_KEY

# fleets.json: fleetName (1-63), fleetMemberName, updateStrategyName, autoUpgradeProfileName and
# group names (1-50): lowercase letters, digits and '-', starting and ending with a letter or digit.
FLEET_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
FLEET_CHILD_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,48}[a-z0-9])?$")
# The shared stack's outputs a member (and the upgrades stack) reads (aksgpu.program); the names are a contract.
FLEET_OUTPUTS = ("fleetName", "fleetResourceGroup", "fleetId", "registryId", "registryLoginServer",
                 "logAnalyticsWorkspaceIds", "prometheusWorkspaceId", "prometheusLocation")

FleetName = Annotated[str, checked(
    FLEET_NAME.fullmatch, "must be 1-63 lowercase letters, digits or '-', starting and ending with a letter or digit "
    "(Fleet Manager's fleetName)", 'rename it, e.g. "gpu-fleet"')]
FLEET_CHILD_NAME_RULE = ("must be 1-50 lowercase letters, digits or '-', starting and ending with a letter or digit "
                         "(Fleet Manager's rule for members, groups, stages and profiles)")
FleetChildName = Annotated[str, checked(FLEET_CHILD_NAME.fullmatch, FLEET_CHILD_NAME_RULE, 'rename it, e.g. "canary"')]
# A fleet's location, resource group, hub DNS prefix, its members' clusters, regions and stacks: the
# cluster's types and rules (spec/shared_fields.py), so a fleet takes no value a cluster would refuse.


class FleetMembership(SpecModel):
    """This cluster's place in a fleet (written by `aksgpu render` for a fleet environment's members)."""

    stack: StackName
    """The fleet's shared stack (the fleet environment's name): the member reads the fleet's name, registry and workspaces from its outputs through a stack reference, so that stack is deployed first."""
    member: FleetChildName
    """The FleetMember's name in the fleet: 1-50 lowercase letters, digits or '-'."""
    group: FleetChildName
    """The update group the member belongs to; the fleet's update stages name groups."""


class FleetHub(SpecModel):
    """Fleet Manager's hub: a small managed cluster that placement and multi-cluster networking need."""

    enabled: bool = False
    """false: a hubless fleet, which runs update runs, strategies and auto-upgrade profiles for no Fleet Manager fee. true: Fleet Manager also creates a hub, a single-node AKS cluster (Standard tier, in a resource group FL_*) billed as such, needed for cluster resource placement, managed namespaces and multi-cluster load balancing. Cannot be changed after the fleet is created."""
    dns_prefix: DnsPrefix | None = None
    """DNS prefix of the hub's API server: 1-54 letters, digits or '-', starting and ending with a letter or digit (a cluster's dnsPrefix rule). None: the fleet name. Hub only."""
    vm_size: str | None = Field(default=None, min_length=1)
    """VM size of the hub's one node, with a system pool's rules: in aksgpu's VM size table (or vmSizeNotInCatalog), not B-series, at least 2 vCPUs and 4 GiB, no GPUs. None: Fleet Manager's default. Hub only."""
    vm_size_not_in_catalog: bool = False
    """true: vmSize is a real Azure size aksgpu's VM size table does not list yet, as a pool's vmSizeNotInCatalog. false: a size missing from the table is an error, with the nearest listed name."""


class FleetRegistry(SpecModel):
    """One Premium container registry for the fleet, replicated to every member region."""

    mode: Literal["create", "none"] = "create"
    """create: one registry in the fleet's region with a geo-replica in every other member region; every member's kubelet gets AcrPull on it. none: members keep their own registry settings."""
    name: str | None = None
    """Name of the registry: 5-50 letters and digits, unique across Azure. None: the fleet name's letters and digits plus "acr"."""
    zone_redundancy: bool = True
    """Make the registry and each replica zone-redundant (in regions with zones)."""
    public_network_access: bool = False
    """Let the registry be reached from the internet. false: each member reaches it through a private endpoint in its own VNet (members need network.vnet mode create or existing); image export is off."""
    untagged_retention_days: int | None = Field(default=7, ge=0, le=365)
    """Days (0-365) an untagged manifest is kept. None: kept for ever."""


class FleetLogAnalytics(SpecModel):
    """Where the members' logs go."""

    mode: Literal["perRegion", "single", "perMember"] = "perRegion"
    """perRegion: one workspace per member region in the shared stack (no cross-region log traffic); single: one workspace in the fleet's region for all; perMember: each member keeps its own monitoring.logAnalytics."""
    retention_days: int = Field(default=30, ge=30, le=730)
    """Days the shared workspaces keep data, 30-730."""


class UpdateStage(SpecModel):
    """One stage of the update strategy: its groups are updated in parallel, then the wait."""

    name: FleetChildName
    """The stage's name, unique in the strategy."""
    groups: list[FleetChildName] = Field(min_length=1)
    """The update groups this stage updates in parallel (members of one group go one after another); each group in one stage only."""
    after_stage_wait_seconds: int = Field(default=0, ge=0, le=2_147_483_647)
    """Seconds to wait after the stage before the next one starts (a soak time to watch the canary)."""


class AutoUpgradeProfile(SpecModel):
    """An auto-upgrade profile: Fleet Manager starts an update run, through the strategy, when the channel has a new version."""

    name: FleetChildName
    """The profile's name."""
    channel: Literal["Stable", "Rapid", "NodeImage"]
    """Stable: the latest patch of minor version N-1; Rapid: the latest patch of the newest minor; NodeImage: the newest node images."""
    node_image_selection: Literal["Latest", "Consistent"] = "Latest"
    """Latest: each cluster gets the newest image of its region; Consistent: every cluster the same (oldest common) image."""
    disabled: bool = False
    """Keep the profile but let it start no runs."""


class FleetMemberSummary(SpecModel):
    """What the shared stack knows of a member: where it is and its update group."""

    name: FleetChildName
    """The member's name."""
    stack: StackName
    """The member's stack."""
    cluster_name: ClusterName
    """The member's AKS cluster name."""
    location: Location
    """The member's region."""
    group: FleetChildName
    """The member's update group."""


class FleetSpec(SpecModel):
    """The shared part of a fleet: Fleet Manager, update stages, registry and workspaces."""

    name: FleetName
    """Name of the Fleet Manager fleet: 1-63 lowercase letters, digits or '-'."""
    location: Location
    """Region of the fleet and of the shared registry and Azure Monitor workspace."""
    resource_group: ResourceGroupName
    """The resource group aksgpu creates for the fleet and its shared parts."""
    tags: dict[str, str] = Field(default_factory=dict)
    """Azure tags on every shared resource; aksgpu adds managed-by: aksgpu."""
    policy_owned_tags: list[str] = Field(default_factory=list)
    """Tag names Azure Policy adds or sets (Modify or Append effect) on the shared resources, e.g. costCenter: every tagged resource of the shared stack ignores changes to them, so they are no drift. Not also in tags (aksgpu would set a value the policy overwrites)."""
    protect: bool = False
    """Protect the fleet, registry, workspaces and resource group from `pulumi destroy`."""
    hub: FleetHub = FleetHub()
    """Hubless (the default) or with a hub."""
    registry: FleetRegistry = FleetRegistry()
    """The fleet's registry."""
    log_analytics: FleetLogAnalytics = FleetLogAnalytics()
    """The fleet's Log Analytics workspaces."""
    prometheus: bool = True
    """One Azure Monitor workspace (managed Prometheus) in the fleet's region for every member with monitoring.managedPrometheus; false: each such member has its own."""
    members: list[FleetMemberSummary] = Field(default_factory=list)
    """The member clusters (at least one)."""

    @property
    def member_regions(self) -> list[str]:
        return sorted({member.location for member in self.members})

    @property
    def registry_name(self) -> str:
        return self.registry.name or fleet_registry_name(self.name)

    def issues(self) -> list[Issue]:
        return list(check_fleet(self))


class FleetUpgradesSpec(SpecModel):
    """How Fleet Manager upgrades the members: the staged update strategy and the auto-upgrade
    profiles that run it. Its own stack, deployed after the members: a strategy may name only
    groups that members have already joined (fleets.json, UpdateGroup.name: "must match a group
    name of an existing fleet member")."""

    stack: StackName
    """The fleet's shared stack, whose outputs name the fleet (a stack reference)."""
    update_stages: list[UpdateStage] = Field(min_length=1)
    """The update strategy: stages run one after another (e.g. a canary group, a wait, then the rest)."""
    auto_upgrade: list[AutoUpgradeProfile] = Field(default_factory=list)
    """Auto-upgrade profiles that start update runs through the strategy. Empty: update runs are started by hand (`az fleet updaterun create ... --update-strategy-name`)."""
    members: list[FleetMemberSummary] = Field(default_factory=list)
    """The member clusters and their groups (at least one)."""

    @property
    def upgrades_kubernetes(self) -> bool:
        return any(profile.channel != "NodeImage" and not profile.disabled for profile in self.auto_upgrade)

    @property
    def upgrades_node_images(self) -> bool:
        return any(profile.channel == "NodeImage" and not profile.disabled for profile in self.auto_upgrade)

    def issues(self) -> list[Issue]:
        return list(check_upgrades(self))


def fleet_registry_name(fleet_name: str) -> str:
    """The registry name aksgpu derived before names had a suffix: the fleet name's letters and
    digits plus "acr". Kept for a fleet whose stack file was rendered without a recorded name (its
    registry may exist: renaming it would replace it); a new fleet gets suffixed_fleet_registry."""
    return re.sub(r"[^a-zA-Z0-9]", "", fleet_name).lower()[:47] + "acr"


# A registry's name is unique across all of Azure (catalog/azure_names.yaml, scope global): two
# fleets named gpu-training, in two resource groups or two teams' subscriptions, must not both ask
# for gputrainingacr. The suffix comes from what identifies the fleet, as a cluster's does
# (spec/names.py global_suffix); "fleet/" keeps a fleet's apart from a cluster of the same name in
# the same group (a cluster name has no '/').
def fleet_global_suffix(resource_group: str, location: str, fleet_name: str) -> str:
    """Six base-36 characters from the fleet's resource group, location and name."""
    return global_suffix(resource_group, location, f"fleet/{fleet_name}")


def suffixed_fleet_registry(spec: FleetSpec) -> str:
    """<fleet name's letters and digits>acr<suffix>: 5-50 letters and digits."""
    return suffixed_registry(spec.name, fleet_global_suffix(spec.resource_group, spec.location, spec.name))


def log_analytics_workspace(fleet_name: str, region: str | None) -> str:
    """The name of a shared workspace: per region, or the fleet's single one (region None)."""
    return f"{fleet_name}-{region}-logs" if region else f"{fleet_name}-logs"


def check_fleet(spec: FleetSpec) -> Iterator[Issue]:
    limits = catalog.limit("fleet")
    if not spec.members:
        yield Issue("members", [], "a fleet needs at least one member cluster", "add members")
    yield from _duplicates("members", [member.name for member in spec.members], "member names")
    yield from _duplicates("members", [member.stack for member in spec.members], "member stacks")
    yield from _duplicates("members", [member.cluster_name for member in spec.members], "member cluster names")
    if len(spec.members) > limits["maxMembers"]:
        yield Issue("members", len(spec.members), f"a fleet holds at most {limits['maxMembers']} member clusters",
                    "split the members into two fleets")
    if spec.registry.mode == "create":
        yield from names.check_name("registry.name", spec.registry_name, "Microsoft.ContainerRegistry/registries",
                                    "set fleet.registry.name to such a name")
    yield from _check_workspace_names(spec)
    yield from check_location(spec.location)
    for index, member in enumerate(spec.members):
        yield from check_location(member.location, f"members[{index}].location")
    hub = spec.hub
    if not hub.enabled and (hub.dns_prefix is not None or hub.vm_size is not None):
        yield Issue("hub", hub.model_dump(by_alias=True, exclude_none=True, exclude_defaults=True),
                    "dnsPrefix and vmSize describe a hub, and this fleet has none",
                    "set hub.enabled: true, or remove them")
    elif hub.vm_size is not None:  # the hub's one node is its system pool: the system pool's size rules
        node = SystemPool.model_validate({"vmSize": hub.vm_size, "vmSizeNotInCatalog": hub.vm_size_not_in_catalog})
        yield from check_system_vm_size(node, "hub")
    yield from check_tags(spec.tags)
    yield from check_policy_owned_tags(spec.tags, spec.policy_owned_tags)


def _check_workspace_names(spec: FleetSpec) -> Iterator[Issue]:
    """The shared workspaces' names, derived from the fleet name and regions, against Azure's rule."""
    mode = spec.log_analytics.mode
    regions = spec.member_regions if mode == "perRegion" else [None] if mode == "single" else []
    for region in regions:
        name = log_analytics_workspace(spec.name, region)
        if not names.obeys("Microsoft.OperationalInsights/workspaces", name):
            rule = names.rule_of("Microsoft.OperationalInsights/workspaces")["rule"]
            yield Issue("name", spec.name, f'the Log Analytics workspace name aksgpu derives from it, "{name}" '
                        f"({len(name)} characters), breaks Azure's rule for Microsoft.OperationalInsights/workspaces: "
                        f"{rule}", "shorten the fleet name, or set logAnalytics.mode: perMember")


def check_upgrades(spec: FleetUpgradesSpec) -> Iterator[Issue]:
    limits = catalog.limit("fleet")
    yield from _duplicates("updateStages", [stage.name for stage in spec.update_stages], "stage names")
    staged: dict[str, str] = {}
    for index, stage in enumerate(spec.update_stages):
        path = f"updateStages[{index}]"
        if len(stage.groups) > limits["maxGroupsPerStage"]:
            yield Issue(f"{path}.groups", len(stage.groups),
                        f"a stage updates at most {limits['maxGroupsPerStage']} groups",
                        "move groups to another stage")
        for group in stage.groups:
            if group in staged:
                yield Issue(f"{path}.groups", group, f"group {group} is already in stage {staged[group]}: a strategy "
                            "updates each group once", "keep the group in one stage")
            staged.setdefault(group, stage.name)
    member_groups = {member.group for member in spec.members}
    for group in sorted(set(staged) - member_groups):
        yield Issue("updateStages", group, "no member is in this group, and Fleet Manager takes only groups "
                    "that members have joined (fleets.json, UpdateGroup)",
                    f"put a member in group {group} (fleet.members[].group), or drop it from the stages")
    for member in spec.members:
        if member.group not in staged:
            yield Issue("updateStages", member.group, f"member {member.name}'s group is in no stage, so the fleet's "
                        "update runs would never upgrade it", f"add group {member.group} to a stage")
    yield from _duplicates("autoUpgrade", [profile.name for profile in spec.auto_upgrade], "profile names")
    channels = Counter(profile.channel for profile in spec.auto_upgrade if not profile.disabled)
    if channels["Stable"] and channels["Rapid"]:
        yield Issue("autoUpgrade", ["Stable", "Rapid"], "two Kubernetes-version channels would start competing "
                    "update runs", "keep one of Stable and Rapid (or disable one)")


def _duplicates(path: str, values: list[str], what: str) -> Iterator[Issue]:
    for value, count in sorted(Counter(values).items()):
        if count > 1:
            yield Issue(path, value, f"{what} must be unique in a fleet; this one is used {count} times",
                        "rename all but one")


def parse_fleet_spec(raw: object, source: str = FLEET_KEY) -> tuple[FleetSpec, list[Issue]]:
    """Validate `raw` (the parsed `aksgpu:fleet` value); raises SpecError listing every error."""
    return _parse(FleetSpec, raw, source)


def parse_fleet_upgrades_spec(raw: object, source: str = FLEET_UPGRADES_KEY) -> tuple[FleetUpgradesSpec,
                                                                                             list[Issue]]:
    """Validate `raw` (the parsed `aksgpu:fleetUpgrades` value); raises SpecError listing every error."""
    return _parse(FleetUpgradesSpec, raw, source)


def _parse(model: type[FleetSpec] | type[FleetUpgradesSpec], raw: object, source: str) -> tuple[Any, list[Issue]]:
    if not isinstance(raw, dict):
        raise SpecError([Issue("(top level)", raw, "the fleet spec must be a mapping of fields",
                               "render it from environments.yaml (`aksgpu render ENV`)")], source)
    try:
        spec = model.model_validate(raw)
    except ValidationError as error:
        raise SpecError(issues_from_validation_error(error, raw, model), source) from None
    issues = spec.issues()
    if any(issue.severity == "error" for issue in issues):
        raise SpecError(issues, source)
    return spec, issues
