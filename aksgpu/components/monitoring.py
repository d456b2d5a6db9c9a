"""Monitoring: where telemetry goes (workspaces, before the cluster) and what the cluster sends
there (collection rules and diagnostic settings, after the cluster).

The split follows the data: the cluster needs the workspace ID for Container Insights, and the
collection rules need the cluster's ID.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
from pulumi_azure_native import monitor, operationalinsights

from aksgpu.spec import Monitoring as MonitoringSpec
from aksgpu.spec import names

CONTAINER_INSIGHTS_STREAM = "Microsoft-ContainerInsights-Group-Default"
PROMETHEUS_STREAM = "Microsoft-PrometheusMetrics"


@dataclass
class MonitoringArgs:
    spec: MonitoringSpec
    cluster_name: str
    location: str
    resource_group_name: pulumi.Input[str]
    protect: bool = False
    tags: dict[str, str] = field(default_factory=dict)
    # The fleet's workspaces, for a member with logAnalytics mode fleet or prometheusWorkspace fleet.
    fleet_workspace_id: pulumi.Input[str] | None = None
    fleet_prometheus_workspace_id: pulumi.Input[str] | None = None


class Monitoring(pulumi.ComponentResource):
    """The Log Analytics workspace (created, existing or the fleet's) and, for managed Prometheus,
    an Azure Monitor workspace (created, or the fleet's)."""

    workspace_id: pulumi.Output[str] | None
    prometheus_workspace_id: pulumi.Output[str] | None

    def __init__(self, name: str, args: MonitoringArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("aksgpu:index:Monitoring", name, None, opts)
        spec = args.spec.log_analytics
        self.workspace_id = None
        self.prometheus_workspace_id = None
        if spec.mode == "create":
            workspace = operationalinsights.Workspace(
                f"{name}-logs",
                workspace_name=spec.name or names.log_analytics_workspace(args.cluster_name),
                resource_group_name=args.resource_group_name,
                location=args.location,
                sku={"name": "PerGB2018"},
                retention_in_days=spec.retention_days,
                # Entra ID sign-in only (policy log-local-auth): the agents use managed identity.
                features={"disable_local_auth": True},
                tags=args.tags,
                opts=pulumi.ResourceOptions(parent=self, protect=args.protect),
            )
            self.workspace_id = workspace.id
        elif spec.mode == "existing":
            self.workspace_id = pulumi.Output.from_input(spec.workspace_id)  # type: ignore[arg-type]  # the spec requires it in existing mode
        elif spec.mode == "fleet":
            self.workspace_id = pulumi.Output.from_input(args.fleet_workspace_id)  # type: ignore[arg-type]  # set when mode is fleet
        if args.spec.managed_prometheus and args.spec.prometheus_workspace == "fleet":
            self.prometheus_workspace_id = pulumi.Output.from_input(args.fleet_prometheus_workspace_id)  # type: ignore[arg-type]  # set when mode is fleet
        elif args.spec.managed_prometheus:
            prometheus = monitor.AzureMonitorWorkspace(
                f"{name}-prometheus",
                azure_monitor_workspace_name=names.prometheus_workspace(args.cluster_name),
                resource_group_name=args.resource_group_name,
                location=args.location,
                tags=args.tags,
                opts=pulumi.ResourceOptions(parent=self, protect=args.protect),
            )
            self.prometheus_workspace_id = prometheus.id
        self.register_outputs({"workspaceId": self.workspace_id, "prometheusWorkspaceId": self.prometheus_workspace_id})


@dataclass
class ClusterMonitoringArgs:
    spec: MonitoringSpec
    cluster_name: str
    cluster_id: pulumi.Input[str]
    location: str
    resource_group_name: pulumi.Input[str]
    workspace_id: pulumi.Input[str] | None
    prometheus_workspace_id: pulumi.Input[str] | None
    tags: dict[str, str] = field(default_factory=dict)
    # Region of the Prometheus collection endpoint and rule: the Azure Monitor workspace's (None:
    # the cluster's, where its own workspace is).
    prometheus_location: pulumi.Input[str] | None = None


class ClusterMonitoring(pulumi.ComponentResource):
    """Control-plane diagnostic settings, the Container Insights collection rule (AAD auth needs
    one) and the managed Prometheus collection endpoint, rule and association."""

    def __init__(self, name: str, args: ClusterMonitoringArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("aksgpu:index:ClusterMonitoring", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        spec = args.spec
        if args.workspace_id is not None and spec.control_plane_logs:
            monitor.DiagnosticSetting(
                f"{name}-control-plane",
                name="aksgpu-control-plane",
                resource_uri=args.cluster_id,
                workspace_id=args.workspace_id,
                # Resource-specific tables (AKSControlPlane, AKSAudit...) are cheaper to query.
                log_analytics_destination_type="Dedicated",
                logs=[{"category": category, "enabled": True} for category in spec.control_plane_logs],
                metrics=[{"category": "AllMetrics", "enabled": True}],
                opts=child,
            )
        if args.workspace_id is not None and spec.container_insights:
            rule = monitor.DataCollectionRule(
                f"{name}-insights",
                data_collection_rule_name=names.container_insights_rule(args.location, args.cluster_name),
                resource_group_name=args.resource_group_name,
                location=args.location,
                kind="Linux",
                data_sources={
                    "extensions": [{
                        "name": "ContainerInsightsExtension",
                        "extension_name": "ContainerInsights",
                        "streams": [CONTAINER_INSIGHTS_STREAM],
                        "extension_settings": {
                            "dataCollectionSettings": {"interval": "1m", "namespaceFilteringMode": "Off",
                                                       "enableContainerLogV2": True},
                        },
                    }],
                },
                destinations={"log_analytics": [{"name": "ciworkspace", "workspace_resource_id": args.workspace_id}]},
                data_flows=[{"streams": [CONTAINER_INSIGHTS_STREAM], "destinations": ["ciworkspace"]}],
                tags=args.tags,
                opts=child,
            )
            monitor.DataCollectionRuleAssociation(
                f"{name}-insights-link",
                association_name="ContainerInsightsExtension",
                resource_uri=args.cluster_id,
                data_collection_rule_id=rule.id,
                description="Container Insights for this cluster; deleting it stops the collection.",
                opts=child,
            )
        if args.prometheus_workspace_id is not None:
            prometheus_location = args.prometheus_location or args.location
            endpoint = monitor.DataCollectionEndpoint(
                f"{name}-prometheus-endpoint",
                data_collection_endpoint_name=names.prometheus_endpoint(args.location, args.cluster_name),
                resource_group_name=args.resource_group_name,
                location=prometheus_location,
                kind="Linux",
                tags=args.tags,
                opts=child,
            )
            rule = monitor.DataCollectionRule(
                f"{name}-prometheus",
                data_collection_rule_name=names.prometheus_rule(args.location, args.cluster_name),
                resource_group_name=args.resource_group_name,
                location=prometheus_location,
                kind="Linux",
                data_collection_endpoint_id=endpoint.id,
                data_sources={"prometheus_forwarder": [{"name": "PrometheusDataSource",
                                                        "streams": [PROMETHEUS_STREAM]}]},
                destinations={"monitoring_accounts": [{"name": "MonitoringAccount1",
                                                       "account_resource_id": args.prometheus_workspace_id}]},
                data_flows=[{"streams": [PROMETHEUS_STREAM], "destinations": ["MonitoringAccount1"]}],
                tags=args.tags,
                opts=child,
            )
            monitor.DataCollectionRuleAssociation(
                f"{name}-prometheus-link",
                association_name=names.prometheus_rule(args.location, args.cluster_name),
                resource_uri=args.cluster_id,
                data_collection_rule_id=rule.id,
                description="Managed Prometheus for this cluster; deleting it stops the collection.",
                opts=child,
            )
        self.register_outputs({})
