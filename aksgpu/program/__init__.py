"""The aksgpu Pulumi program: stack config -> ClusterSpec -> AksGpuCluster -> stack outputs.

A project's __main__.py calls `run()`. A team that wants more in the same stack (its own
resources next to the cluster) writes its own program instead and composes `AksGpuCluster`
from `aksgpu.components.aks_gpu_cluster` with a spec from `parse_cluster_spec`, as this one does.

A fleet environment's stacks run the same program: its shared stack has `aksgpu:fleet` (a
FleetSpec, declared by AksGpuFleet), each member stack an `aksgpu:cluster` with `fleet` set, and
its upgrades stack `aksgpu:fleetUpgrades` (FleetUpgrades); the last two read the shared stack's
outputs through a stack reference.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pulumi

from aksgpu.program.alias_urns import defer_alias_urns
from aksgpu.components.aks_gpu_cluster import AksGpuCluster
from aksgpu.components.fleet import AksGpuFleet, FleetOutputs, FleetUpgrades
from aksgpu.components.sdk_modules import load_by_class
from aksgpu.spec import ClusterSpec, SpecError, parse_cluster_spec
from aksgpu.spec.fleet import FLEET_OUTPUTS, parse_fleet_spec, parse_fleet_upgrades_spec
from aksgpu.stack_config import CLUSTER, CLUSTER_KEY, FLEET, FLEET_UPGRADES, NAMESPACE

T = TypeVar("T")


def run() -> AksGpuCluster | AksGpuFleet | FleetUpgrades:
    """Declare the cluster of this stack's `aksgpu:cluster` config (or the fleet's shared parts of
    its `aksgpu:fleet`) and export its outputs."""
    defer_alias_urns()  # the engine gets the same aliases; Python skips ~8 s of unused URNs at 100 pools
    load_by_class()  # the SDK modules of the classes declared, not every module of their packages
    config = pulumi.Config(NAMESPACE)
    raw_fleet = _structured(config, FLEET)
    if raw_fleet is not None:
        return _run_fleet(raw_fleet)
    raw_upgrades = _structured(config, FLEET_UPGRADES)
    if raw_upgrades is not None:
        return _run_fleet_upgrades(raw_upgrades)
    raw_spec = _structured(config, CLUSTER)
    if raw_spec is None:
        raise pulumi.RunError(
            f"{CLUSTER_KEY} is not set in this stack's config. Fix: add the environment to stacks/environments.yaml "
            "and render its stack file (`aksgpu init ENV --preset NAME`).")
    spec = _validated(parse_cluster_spec, raw_spec)
    fleet = fleet_outputs(spec.fleet.stack, spec) if spec.fleet is not None else None
    cluster = AksGpuCluster(spec.name, spec, fleet=fleet)
    pulumi.export("clusterName", cluster.cluster.cluster_name)
    pulumi.export("clusterId", cluster.cluster.cluster_id)
    pulumi.export("oidcIssuerUrl", cluster.cluster.oidc_issuer_url)
    pulumi.export("registryLoginServer", cluster.registry.login_server)
    pulumi.export("logAnalyticsWorkspaceId", cluster.monitoring.workspace_id)
    pulumi.export("kubeconfig", cluster.cluster.kubeconfig)
    return cluster


def _structured(config: pulumi.Config, key: str) -> object:
    try:
        return config.get_object(key)
    except (ValueError, RecursionError) as error:  # the engine hands structured config over as JSON
        raise pulumi.RunError(f"{NAMESPACE}:{key} in this stack's config cannot be read ({type(error).__name__}). "
                              "Fix: check it with `aksgpu validate STACK`, which names the line.") from None


def _validated(parse: Callable[[Any], tuple[T, list[Any]]], raw_spec: object) -> T:
    """The spec `parse` makes of the config value, its warnings logged; its errors end the program
    with the message alone (a RunError prints no traceback)."""
    try:
        spec, warnings = parse(raw_spec)
    except SpecError as error:
        raise pulumi.RunError(str(error)) from None
    for warning in warnings:
        pulumi.log.warn(str(warning))
    return spec


def _run_fleet(raw_spec: object) -> AksGpuFleet:
    spec = _validated(parse_fleet_spec, raw_spec)
    fleet = AksGpuFleet(spec.name, spec)
    for name in FLEET_OUTPUTS:
        pulumi.export(name, fleet.outputs[name])
    return fleet


def _run_fleet_upgrades(raw_spec: object) -> FleetUpgrades:
    spec = _validated(parse_fleet_upgrades_spec, raw_spec)
    upgrades = FleetUpgrades(f"{spec.stack}-upgrades", spec, fleet_outputs(spec.stack))
    pulumi.export("updateStrategyId", upgrades.update_strategy_id)
    return upgrades


def fleet_outputs(stack: str, member: ClusterSpec | None = None) -> FleetOutputs:
    """The outputs of a fleet's shared stack (same project, same backend), through a stack reference;
    those `member` uses (its registry or workspaces in mode fleet) must be there."""
    reference = pulumi.StackReference(f"{pulumi.get_organization()}/{pulumi.get_project()}/{stack}")

    def output(name: str, needed: bool) -> pulumi.Output:
        return reference.require_output(name) if needed else reference.get_output(name)

    monitoring = member.monitoring if member is not None else None
    prometheus = monitoring is not None and monitoring.managed_prometheus and monitoring.prometheus_workspace == "fleet"
    return FleetOutputs(
        fleet_name=reference.require_output("fleetName"),
        fleet_resource_group=reference.require_output("fleetResourceGroup"),
        registry_id=output("registryId", member is not None and member.registry.mode == "fleet"),
        registry_login_server=output("registryLoginServer", member is not None and member.registry.mode == "fleet"),
        log_analytics_workspace_ids=output("logAnalyticsWorkspaceIds",
                                           monitoring is not None and monitoring.log_analytics.mode == "fleet"),
        prometheus_workspace_id=output("prometheusWorkspaceId", prometheus),
        prometheus_location=output("prometheusLocation", prometheus),
    )
