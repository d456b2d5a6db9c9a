"""A fleet of AKS GPU clusters: the shared parts (AksGpuFleet), a member's joining (FleetJoin)
and the upgrades (FleetUpgrades).

AksGpuFleet is the shared stack: the Azure Kubernetes Fleet Manager fleet, one Premium registry
geo-replicated to every member region, the Log Analytics workspaces and one Azure Monitor
workspace. Its outputs (FLEET_OUTPUTS) are what the other stacks read through a stack reference,
as FleetOutputs. A member's AksGpuCluster joins the fleet with FleetJoin and uses the shared
registry and workspaces. FleetUpgrades, the upgrades stack, deploys last: the staged update
strategy and the auto-upgrade profiles, which may name only groups members have joined.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
from pulumi_azure_native import containerregistry, containerservice, monitor, operationalinsights, resources

from aksgpu.components.policy_tags import ignore_policy_tags
from aksgpu.spec.fleet import FleetSpec, FleetUpgradesSpec, log_analytics_workspace
from aksgpu.spec.base import AKSGPU_TAGS

UPDATE_STRATEGY_NAME = "aksgpu-stages"


@dataclass
class FleetOutputs:
    """The shared stack's outputs, as a member stack reads them (a stack reference's outputs)."""

    fleet_name: pulumi.Input[str]
    fleet_resource_group: pulumi.Input[str]
    registry_id: pulumi.Input[str]
    registry_login_server: pulumi.Input[str]
    log_analytics_workspace_ids: pulumi.Input[dict[str, str]]
    prometheus_workspace_id: pulumi.Input[str]
    prometheus_location: pulumi.Input[str]

    def log_analytics_workspace_id(self, region: str) -> pulumi.Output[str]:
        """The shared workspace for a member in `region`."""
        return pulumi.Output.from_input(self.log_analytics_workspace_ids).apply(lambda ids: (ids or {}).get(region))  # type: ignore[arg-type, return-value]  # None: no workspace there


class AksGpuFleet(pulumi.ComponentResource):
    """The fleet's shared parts, from one FleetSpec."""

    def __init__(self, name: str, spec: FleetSpec, opts: pulumi.ResourceOptions | None = None) -> None:
        if spec.policy_owned_tags:  # children inherit it: every tagged Azure resource ignores them
            opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(
                transformations=[ignore_policy_tags(spec.policy_owned_tags)]))
        super().__init__("aksgpu:index:AksGpuFleet", name, None, opts)
        tags = {**AKSGPU_TAGS, **spec.tags}
        kept = pulumi.ResourceOptions(parent=self, protect=spec.protect)
        group = resources.ResourceGroup(f"{name}-rg", resource_group_name=spec.resource_group, location=spec.location,
                                        tags=tags, opts=kept)
        hub = None
        if spec.hub.enabled:
            hub = {"dns_prefix": spec.hub.dns_prefix or spec.name[:54].strip("-")}
            if spec.hub.vm_size:
                hub["agent_profile"] = {"vm_size": spec.hub.vm_size}  # type: ignore[assignment]  # a nested plain dict
        fleet = containerservice.Fleet(
            f"{name}-fleet", fleet_name=spec.name, resource_group_name=group.name, location=spec.location,
            hub_profile=hub, tags=tags, opts=kept)  # type: ignore[arg-type]  # a plain dict for the SDK's Args
        workspaces = self._workspaces(name, spec, group.name, tags)
        registry_id, login_server = self._registry(name, spec, group.name, tags, workspaces)
        prometheus_id: pulumi.Output[str] | None = None
        if spec.prometheus:
            prometheus = monitor.AzureMonitorWorkspace(
                f"{name}-prometheus", azure_monitor_workspace_name=f"{spec.name}-prometheus",
                resource_group_name=group.name, location=spec.location, tags=tags, opts=kept)
            prometheus_id = prometheus.id
        self.fleet = fleet
        self.outputs: dict[str, pulumi.Input[object] | None] = {
            "fleetName": fleet.name,
            "fleetResourceGroup": group.name,
            "fleetId": fleet.id,
            "registryId": registry_id,
            "registryLoginServer": login_server,
            "logAnalyticsWorkspaceIds": dict(workspaces) if workspaces else None,
            "prometheusWorkspaceId": prometheus_id,
            "prometheusLocation": spec.location if spec.prometheus else None,
        }
        self.register_outputs(self.outputs)

    def _workspaces(self, name: str, spec: FleetSpec, group_name: pulumi.Input[str],
                    tags: dict[str, str]) -> dict[str, pulumi.Output[str]]:
        """The shared Log Analytics workspaces, by member region (one per region, or the single one for all)."""
        mode = spec.log_analytics.mode
        if mode == "perMember":
            return {}
        regions = spec.member_regions if mode == "perRegion" else [spec.location]
        by_region: dict[str, pulumi.Output[str]] = {}
        for region in regions:
            workspace = operationalinsights.Workspace(
                f"{name}-logs-{region}" if mode == "perRegion" else f"{name}-logs",
                workspace_name=log_analytics_workspace(spec.name, region if mode == "perRegion" else None),
                resource_group_name=group_name, location=region, sku={"name": "PerGB2018"},
                retention_in_days=spec.log_analytics.retention_days,
                # Entra ID sign-in only (policy log-local-auth): the agents use managed identity.
                features={"disable_local_auth": True}, tags=tags,
                opts=pulumi.ResourceOptions(parent=self, protect=spec.protect))
            by_region[region] = workspace.id
        if mode == "single":
            return {region: by_region[spec.location] for region in sorted({spec.location, *spec.member_regions})}
        return by_region

    def _registry(self, name: str, spec: FleetSpec, group_name: pulumi.Input[str], tags: dict[str, str],
                  workspaces: dict[str, pulumi.Output[str]]) -> tuple[pulumi.Output[str] | None,
                                                                      pulumi.Output[str] | None]:
        """The Premium registry in the fleet's region and a geo-replica in every other member region."""
        registry_spec = spec.registry
        if registry_spec.mode == "none":
            return None, None
        policies: dict[str, object] = {}
        if registry_spec.untagged_retention_days is not None:
            policies["retention_policy"] = {"days": registry_spec.untagged_retention_days, "status": "enabled"}
        if not registry_spec.public_network_access:
            policies["export_policy"] = {"status": "disabled"}
        zone_redundancy = "Enabled" if registry_spec.zone_redundancy else "Disabled"
        registry = containerregistry.Registry(
            f"{name}-acr", registry_name=spec.registry_name, resource_group_name=group_name, location=spec.location,
            # Geo-replication needs the Premium SKU.
            sku={"name": "Premium"}, admin_user_enabled=False, anonymous_pull_enabled=False,
            public_network_access="Enabled" if registry_spec.public_network_access else "Disabled",
            policies=policies or None, zone_redundancy=zone_redundancy, tags=tags,
            opts=pulumi.ResourceOptions(parent=self, protect=spec.protect))
        for region in spec.member_regions:
            if region == spec.location:
                continue  # the registry's home region holds it already
            containerregistry.Replication(
                f"{name}-acr-{region}", registry_name=registry.name, replication_name=region,
                resource_group_name=group_name, location=region, zone_redundancy=zone_redundancy,
                region_endpoint_enabled=True, tags=tags, opts=pulumi.ResourceOptions(parent=self))
        home_workspace = workspaces.get(spec.location)
        if home_workspace is not None:
            from aksgpu.components.registry import REGISTRY_LOG_CATEGORIES

            monitor.DiagnosticSetting(
                f"{name}-acr-logs", name="aksgpu-registry", resource_uri=registry.id, workspace_id=home_workspace,
                logs=[{"category": category, "enabled": True} for category in REGISTRY_LOG_CATEGORIES],
                metrics=[{"category": "AllMetrics", "enabled": True}], opts=pulumi.ResourceOptions(parent=self))
        return registry.id, registry.login_server


class FleetUpgrades(pulumi.ComponentResource):
    """The fleet's update strategy (its stages) and the auto-upgrade profiles that run it. Deployed
    after the members: Fleet Manager takes only groups that members have joined."""

    def __init__(self, name: str, spec: FleetUpgradesSpec, fleet: FleetOutputs,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("aksgpu:index:FleetUpgrades", name, None, opts)
        strategy = containerservice.FleetUpdateStrategy(
            f"{name}-update-strategy", update_strategy_name=UPDATE_STRATEGY_NAME, fleet_name=fleet.fleet_name,
            resource_group_name=fleet.fleet_resource_group,
            strategy={"stages": [{"name": stage.name, "groups": [{"name": group_name} for group_name in stage.groups],
                                  "after_stage_wait_in_seconds": stage.after_stage_wait_seconds}
                                 for stage in spec.update_stages]},
            opts=pulumi.ResourceOptions(parent=self))
        for profile in spec.auto_upgrade:
            containerservice.AutoUpgradeProfile(
                f"{name}-auto-upgrade-{profile.name}", auto_upgrade_profile_name=profile.name,
                fleet_name=fleet.fleet_name, resource_group_name=fleet.fleet_resource_group, channel=profile.channel,
                node_image_selection={"type": profile.node_image_selection}, disabled=profile.disabled,
                # The strategy is fixed at creation (updateStrategyId is create-only): a new one replaces the profile.
                update_strategy_id=strategy.id,
                opts=pulumi.ResourceOptions(parent=self, replace_on_changes=["updateStrategyId"]))
        self.update_strategy_id = strategy.id
        self.register_outputs({"updateStrategyId": strategy.id})


@dataclass
class FleetJoinArgs:
    fleet: FleetOutputs
    member_name: str
    group: str
    cluster_id: pulumi.Input[str]


class FleetJoin(pulumi.ComponentResource):
    """The FleetMember that joins a cluster to its fleet, in the fleet's update group."""

    def __init__(self, name: str, args: FleetJoinArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("aksgpu:index:FleetJoin", name, None, opts)
        self.member = containerservice.FleetMember(
            f"{name}-member", fleet_member_name=args.member_name, fleet_name=args.fleet.fleet_name,
            resource_group_name=args.fleet.fleet_resource_group, cluster_resource_id=args.cluster_id,
            group=args.group, opts=pulumi.ResourceOptions(parent=self))
        self.register_outputs({})
