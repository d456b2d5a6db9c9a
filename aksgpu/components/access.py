"""Access: Entra ID sign-in (the AAD profile) and the role assignments that let admin, read-only and
team groups fetch cluster credentials (and, with Azure RBAC, act inside the cluster). With
Kubernetes RBAC their rights inside the cluster are bindings (aksgpu/components/kubernetes/team_access.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi

from aksgpu.components.roles import assign_role
from aksgpu.spec import Access as AccessSpec


def aad_profile(spec: AccessSpec) -> dict[str, Any] | None:
    """The cluster's aadProfile input, or None when Entra ID sign-in is off."""
    if not spec.aad.enabled:
        return None
    profile: dict[str, Any] = {
        "managed": True,
        "enable_azure_rbac": spec.authorization == "azure-rbac",
        "admin_group_object_ids": list(spec.aad.admin_group_object_ids),
    }
    if spec.aad.tenant_id:
        profile["tenant_id"] = spec.aad.tenant_id
    return profile


@dataclass
class AccessArgs:
    spec: AccessSpec
    cluster_id: pulumi.Input[str]
    subscription_id: pulumi.Input[str]


class Access(pulumi.ComponentResource):
    """Role assignments on the cluster for the admin, read-only and team groups."""

    def __init__(self, name: str, args: AccessArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("aksgpu:index:Access", name, None, opts)
        spec = args.spec
        azure_rbac = spec.authorization == "azure-rbac"
        count = 0

        def grant(label: str, role: str, group: str, scope: pulumi.Input[str]) -> None:
            nonlocal count
            assign_role(f"{name}-{label}", role=role, principal_id=group, principal_type="Group", scope=scope,
                        subscription_id=args.subscription_id, parent=self)
            count += 1

        for index, group in enumerate(spec.aad.admin_group_object_ids if spec.aad.enabled else []):
            # Cluster User lets a group fetch the (Entra ID) kubeconfig; what it may do inside the
            # cluster comes from Kubernetes RBAC (adminGroupObjectIDs) or Azure RBAC.
            grant(f"admin{index}-user", "Azure Kubernetes Service Cluster User Role", group, args.cluster_id)
            if azure_rbac:
                grant(f"admin{index}-rbac", "Azure Kubernetes Service RBAC Cluster Admin", group, args.cluster_id)
        for index, group in enumerate(spec.read_only_group_object_ids if spec.aad.enabled else []):
            grant(f"reader{index}-user", "Azure Kubernetes Service Cluster User Role", group, args.cluster_id)
            if azure_rbac:
                grant(f"reader{index}-rbac", "Azure Kubernetes Service RBAC Reader", group, args.cluster_id)
        for team in spec.teams:
            namespace_scope = pulumi.Output.concat(args.cluster_id, "/namespaces/", team.name)
            for index, group in enumerate(team.group_object_ids):
                grant(f"{team.name}{index}-user", "Azure Kubernetes Service Cluster User Role", group, args.cluster_id)
                if azure_rbac:
                    grant(f"{team.name}{index}-rbac", "Azure Kubernetes Service RBAC Writer", group, namespace_scope)
        self.role_assignment_count = count
        self.register_outputs({"roleAssignments": count})
