"""Cluster: the managed cluster, its control plane settings, identities and the system pool."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi_azure_native import containerservice, managedidentity

from aksgpu.components.disk_encryption import disk_encryption_set
from aksgpu.components.kms import secrets_encryption
from aksgpu.components.pool_profile import pool_properties
from aksgpu.components.roles import assign_role
from aksgpu.spec import ClusterSpec, names
from aksgpu.spec.control_plane import MAINTENANCE_CONFIG_NAMES


@dataclass
class ClusterArgs:
    spec: ClusterSpec
    resource_group_name: pulumi.Input[str]
    subscription_id: pulumi.Input[str]
    subnet_ids: Mapping[str, pulumi.Input[str]]
    aad_profile: dict[str, Any] | None
    workspace_id: pulumi.Input[str] | None
    prometheus_enabled: bool = False
    tenant_id: pulumi.Input[str] = ""  # the Entra ID tenant of the KMS vault aksgpu creates


class Cluster(pulumi.ComponentResource):
    """The ManagedCluster with the critical-system pool inline, a user-assigned control-plane
    identity and a kubelet identity, and the planned-maintenance windows.

    Only the system pool is inline: AKS ignores later changes to `agentPoolProfiles` (every other
    pool is an AgentPool, see NodePools), so that list is in ignoreChanges.
    """

    cluster: containerservice.ManagedCluster
    cluster_name: pulumi.Output[str]
    cluster_id: pulumi.Output[str]
    oidc_issuer_url: pulumi.Output[str]
    kubelet_principal_id: pulumi.Output[str]
    kubeconfig: pulumi.Output[str]

    def __init__(self, name: str, args: ClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("aksgpu:index:Cluster", name, None, opts)
        spec = args.spec
        child = pulumi.ResourceOptions(parent=self)
        identity_common: dict[str, Any] = {"resource_group_name": args.resource_group_name, "location": spec.location,
                                           "tags": spec.tags}
        control_plane_identity = managedidentity.UserAssignedIdentity(
            f"{name}-control-plane", resource_name_=names.identity(spec.name, "control-plane"), **identity_common,
            opts=child)
        kubelet_identity = managedidentity.UserAssignedIdentity(
            f"{name}-kubelet", resource_name_=names.identity(spec.name, "kubelet"), **identity_common, opts=child)
        # AKS checks at creation that the control-plane identity may assign the kubelet identity
        # and manage the subnets it will place nodes and the API server in.
        grants = [assign_role(
            f"{name}-assign-kubelet", role="Managed Identity Operator",
            principal_id=control_plane_identity.principal_id, principal_type="ServicePrincipal",
            scope=kubelet_identity.id, subscription_id=args.subscription_id, parent=self)]
        for subnet_name, subnet_id in sorted(args.subnet_ids.items()):
            grants.append(assign_role(
                f"{name}-network-{subnet_name}", role="Network Contributor",
                principal_id=control_plane_identity.principal_id, principal_type="ServicePrincipal",
                scope=subnet_id, subscription_id=args.subscription_id, parent=self))

        kms = secrets_encryption(
            name, spec, parent=self, resource_group_name=args.resource_group_name, tenant_id=args.tenant_id,
            subscription_id=args.subscription_id, principal_id=control_plane_identity.principal_id,
            workspace_id=args.workspace_id)
        grants += kms.grants  # type: ignore[arg-type]  # grants are Resources
        disk_encryption_set_id, disk_grants = disk_encryption_set(
            name, spec, parent=self, vault=kms.vault, resource_group_name=args.resource_group_name,
            subscription_id=args.subscription_id, principal_id=control_plane_identity.principal_id)
        grants += disk_grants  # type: ignore[arg-type]  # grants are Resources

        system = spec.system_pool
        system_profile = {
            "name": system.name,
            "mode": "System",
            **pool_properties(system, spec, args.subnet_ids, list(system.zones)),
            "node_taints": system.taints or None,
        }
        self.cluster = containerservice.ManagedCluster(
            f"{name}-aks",
            resource_name_=spec.name,
            resource_group_name=args.resource_group_name,
            location=spec.location,
            dns_prefix=spec.effective_dns_prefix,
            kubernetes_version=spec.control_plane.kubernetes_version,
            sku={"name": "Base", "tier": spec.control_plane.tier},
            support_plan=spec.control_plane.support_plan,
            auto_upgrade_profile={
                "upgrade_channel": spec.control_plane.upgrade_channel,
                "node_os_upgrade_channel": spec.control_plane.node_os_upgrade_channel,
            },
            identity={"type": "UserAssigned", "user_assigned_identities": [control_plane_identity.id]},
            identity_profile={"kubeletidentity": {
                "resource_id": kubelet_identity.id,
                "client_id": kubelet_identity.client_id,
                "object_id": kubelet_identity.principal_id,
            }},
            agent_pool_profiles=[{k: v for k, v in system_profile.items() if v is not None}],
            network_profile=_network_profile(spec),
            api_server_access_profile=_api_server_profile(spec, args.subnet_ids),
            auto_scaler_profile=spec.control_plane.autoscaler.profile(spec),
            enable_rbac=True,
            aad_profile=args.aad_profile,
            disable_local_accounts=not spec.access.local_accounts,
            oidc_issuer_profile={"enabled": spec.access.oidc_issuer},
            security_profile=_security_profile(spec, args.workspace_id, kms.profile),
            disk_encryption_set_id=disk_encryption_set_id,
            addon_profiles=_addon_profiles(spec, args.workspace_id),
            azure_monitor_profile=_azure_monitor_profile(args.prometheus_enabled),
            node_resource_group=names.node_resource_group(spec.resource_group.name, spec.name),
            tags=spec.tags,
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=grants,
                protect=spec.protect,
                ignore_changes=["agentPoolProfiles"],
            ),
        )
        previous: pulumi.Resource = self.cluster
        for window in spec.control_plane.maintenance_windows:
            # One cluster operation at a time: AKS answers overlapping ones with 409.
            previous = containerservice.MaintenanceConfiguration(
                f"{name}-{window.schedule}",
                config_name=MAINTENANCE_CONFIG_NAMES[window.schedule],
                resource_group_name=args.resource_group_name,
                resource_name_=self.cluster.name,
                maintenance_window={
                    "schedule": {"weekly": {"day_of_week": window.day_of_week,
                                            "interval_weeks": window.interval_weeks}},
                    "duration_hours": window.duration_hours,
                    "start_time": window.start_time,
                    "utc_offset": window.utc_offset,
                },
                opts=pulumi.ResourceOptions(parent=self, depends_on=[previous]),
            )
        self.last_operation = previous
        self.cluster_name = self.cluster.name
        self.cluster_id = self.cluster.id
        self.oidc_issuer_url = self.cluster.oidc_issuer_profile.apply(
            lambda profile: (profile.issuer_url if profile else None) or "")
        self.kubelet_principal_id = kubelet_identity.principal_id
        credentials = containerservice.list_managed_cluster_user_credentials_output(
            resource_group_name=args.resource_group_name,
            resource_name=self.cluster.name,
            # Entra ID clusters hand out an exec kubeconfig that signs in through kubelogin.
            format="exec" if args.aad_profile else None,
            opts=pulumi.InvokeOutputOptions(parent=self),
        )
        # The list call's result is not marked secret by the provider; the kubeconfig is one.
        self.kubeconfig = pulumi.Output.secret(
            credentials.kubeconfigs[0].value.apply(lambda value: base64.b64decode(value).decode()))
        self.register_outputs({
            "clusterName": self.cluster_name,
            "clusterId": self.cluster_id,
            "oidcIssuerUrl": self.oidc_issuer_url,
            "kubeletPrincipalId": self.kubelet_principal_id,
        })


def _network_profile(spec: ClusterSpec) -> dict[str, Any]:
    net = spec.network
    profile: dict[str, Any] = {
        "network_plugin": "kubenet" if net.plugin == "kubenet" else "azure",
        "network_plugin_mode": "overlay" if net.plugin == "azure-overlay" else None,
        "network_dataplane": net.dataplane if net.plugin != "kubenet" else None,
        "network_policy": net.policy,
        "pod_cidr": net.effective_pod_cidr,
        "service_cidr": net.service_cidr,
        "dns_service_ip": net.dns_service_ip,
        "outbound_type": net.outbound,
        "load_balancer_sku": "standard",
    }
    if net.outbound == "loadBalancer":
        profile["load_balancer_profile"] = {"managed_outbound_ips": {"count": net.outbound_ips}}
    elif net.outbound == "managedNATGateway":
        profile["nat_gateway_profile"] = {
            "managed_outbound_ip_profile": {"count": net.outbound_ips},
            "idle_timeout_in_minutes": net.nat_idle_timeout_minutes,
        }
    return {key: value for key, value in profile.items() if value is not None}


def _api_server_profile(spec: ClusterSpec, subnet_ids: Mapping[str, pulumi.Input[str]]) -> dict[str, Any]:
    api = spec.control_plane.api_server
    profile: dict[str, Any] = {"enable_private_cluster": api.access == "private",
                               "disable_run_command": not spec.security.run_command}
    if api.access == "private":
        profile["private_dns_zone"] = api.private_dns_zone
    if api.authorized_ip_ranges:
        profile["authorized_ip_ranges"] = list(api.authorized_ip_ranges)
    if api.vnet_integration:
        profile["enable_vnet_integration"] = True
        if api.subnet is not None:
            profile["subnet_id"] = subnet_ids[api.subnet]
    return profile


def _addon_profiles(spec: ClusterSpec, workspace_id: pulumi.Input[str] | None) -> dict[str, Any] | None:
    addons: dict[str, Any] = {}
    if workspace_id is not None and spec.monitoring.container_insights:
        # useAADAuth: the agent signs in with managed identity and sends through a data collection
        # rule (ClusterMonitoring) instead of a shared workspace key.
        addons["omsagent"] = {"enabled": True, "config": {
            "logAnalyticsWorkspaceResourceID": workspace_id, "useAADAuth": "true"}}
    security = spec.security
    if security.azure_policy:
        addons["azurepolicy"] = {"enabled": True, "config": {"version": "v2"}}
    provider = security.key_vault_secrets_provider
    if provider.enabled:
        # Add-on config values are strings in the API: "true", not true.
        addons["azureKeyvaultSecretsProvider"] = {"enabled": True, "config": {
            "enableSecretRotation": "true" if provider.rotation else "false",
            "rotationPollInterval": provider.rotation_poll_interval}}
    return addons or None


def _security_profile(spec: ClusterSpec, workspace_id: pulumi.Input[str] | None,
                      kms_profile: dict[str, Any] | None) -> dict[str, Any]:
    security = spec.security
    profile: dict[str, Any] = {"workload_identity": {"enabled": spec.access.workload_identity}}
    if kms_profile is not None:
        profile["azure_key_vault_kms"] = kms_profile
    if security.defender and workspace_id is not None:
        profile["defender"] = {"log_analytics_workspace_resource_id": workspace_id,
                               "security_monitoring": {"enabled": True}}
    if security.image_cleaner_hours is not None:
        profile["image_cleaner"] = {"enabled": True, "interval_hours": security.image_cleaner_hours}
    return profile


def _azure_monitor_profile(enabled: bool) -> dict[str, Any] | None:
    if not enabled:
        return None
    return {"metrics": {"enabled": True, "kube_state_metrics": {
        "metric_labels_allowlist": "", "metric_annotations_allow_list": ""}}}
