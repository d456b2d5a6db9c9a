"""Logs and metrics: Log Analytics, Container Insights, control-plane logs, managed Prometheus."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from aksgpu import catalog

from aksgpu.spec import names
from aksgpu.spec.base import Issue, SpecModel
from aksgpu.spec.resource_ids import check_id

if TYPE_CHECKING:
    from aksgpu.spec import ClusterSpec

WORKSPACE_TYPE = "Microsoft.OperationalInsights/workspaces"
# kube-audit-admin and guard cover audit needs at a fraction of kube-audit's volume (PSRule
# Azure.AKS.AuditLogs); the rest are the components operators read when scaling goes wrong.
DEFAULT_LOG_CATEGORIES = [
    "kube-apiserver",
    "kube-audit-admin",
    "kube-controller-manager",
    "kube-scheduler",
    "cluster-autoscaler",
    "cloud-controller-manager",
    "guard",
]


class LogAnalytics(SpecModel):
    """The Log Analytics workspace: created by aksgpu, an existing one, or none."""

    mode: Literal["create", "existing", "fleet", "none"] = "create"
    """create: aksgpu creates a workspace; existing: use the workspace given by workspaceId; fleet: the fleet's workspace for the cluster's region (a fleet member only); none: no workspace (then turn off containerInsights and controlPlaneLogs)."""
    name: str | None = None
    """Name of the workspace aksgpu creates: 4-63 letters, digits or '-', starting and ending with a letter or digit (Azure's rule for Microsoft.OperationalInsights/workspaces). None: "<cluster name>-logs"."""
    retention_days: int = Field(default=30, ge=30, le=730)
    """Days the workspace aksgpu creates keeps data, 30-730."""
    workspace_id: str | None = None
    """Resource ID of an existing Log Analytics workspace (mode existing only): /subscriptions/<subscription GUID>/resourceGroups/<group>/providers/Microsoft.OperationalInsights/workspaces/<name>."""


class Monitoring(SpecModel):
    """What the cluster sends where."""

    log_analytics: LogAnalytics = LogAnalytics()
    """The Log Analytics workspace that receives Container Insights data and control-plane logs."""
    container_insights: bool = True
    """Turn on Container Insights (the monitoring add-on, signing in with managed identity), sending to the workspace; needs a workspace."""
    control_plane_logs: list[str] = Field(default_factory=lambda: list(DEFAULT_LOG_CATEGORIES))
    """AKS resource-log categories sent to the workspace. The default leaves out kube-audit: kube-audit-admin and guard cover audit needs at a fraction of its volume. Empty: none; otherwise needs a workspace."""
    managed_prometheus: bool = False
    """Collect metrics with Azure Monitor managed Prometheus into an Azure Monitor workspace aksgpu creates ("<cluster name>-prometheus"), or the fleet's (prometheusWorkspace)."""
    prometheus_workspace: Literal["own", "fleet"] = "own"
    """own: managed Prometheus writes to the cluster's own Azure Monitor workspace; fleet: to the fleet's one workspace (a fleet member only), through a collection endpoint and rule in the workspace's region."""


def check_monitoring(spec: ClusterSpec) -> Iterator[Issue]:
    monitoring = spec.monitoring
    workspace = monitoring.log_analytics
    if workspace.mode == "existing":
        yield from check_id("monitoring.logAnalytics.workspaceId", workspace.workspace_id, WORKSPACE_TYPE)
    if workspace.name is not None:
        yield from names.check_name("monitoring.logAnalytics.name", workspace.name, WORKSPACE_TYPE,
                                    "rename the workspace, or leave name out for \"<cluster name>-logs\"")
    if workspace.mode == "fleet" and spec.fleet is None:
        yield Issue("monitoring.logAnalytics.mode", "fleet", "the fleet's workspace is for a member of a fleet",
                    "set mode to create, existing or none; fleet members are rendered from a fleet environment")
    if monitoring.prometheus_workspace == "fleet" and spec.fleet is None:
        yield Issue("monitoring.prometheusWorkspace", "fleet", "the fleet's workspace is for a member of a fleet",
                    "set prometheusWorkspace: own")
    if monitoring.prometheus_workspace == "fleet" and not monitoring.managed_prometheus:
        yield Issue("monitoring.prometheusWorkspace", "fleet", "names where managed Prometheus writes, and it is off",
                    "set monitoring.managedPrometheus: true, or prometheusWorkspace: own", "warning")
    if workspace.mode != "existing" and workspace.workspace_id is not None:
        yield Issue("monitoring.logAnalytics.workspaceId", workspace.workspace_id, "a workspaceId is for mode: existing",
                    "remove it, or set mode: existing")
    if workspace.mode == "none":
        if monitoring.container_insights:
            yield Issue("monitoring.containerInsights", True, "Container Insights sends to a Log Analytics workspace",
                        "set logAnalytics.mode to create or existing, or containerInsights: false")
        if monitoring.control_plane_logs:
            yield Issue("monitoring.controlPlaneLogs", monitoring.control_plane_logs,
                        "control-plane logs are sent to a Log Analytics workspace",
                        "set logAnalytics.mode to create or existing, or controlPlaneLogs: []")
    known = catalog.load("aks_logs")["categories"]
    for index, category in enumerate(monitoring.control_plane_logs):
        if category not in known:
            yield Issue(f"monitoring.controlPlaneLogs[{index}]", category, "is not an AKS resource-log category",
                        f"use one of: {', '.join(known)}")
    if "kube-audit" in monitoring.control_plane_logs and "kube-audit-admin" in monitoring.control_plane_logs:
        yield Issue("monitoring.controlPlaneLogs", monitoring.control_plane_logs,
                    "kube-audit already contains every kube-audit-admin event", "keep one of the two", "warning")
