"""RepairIdentity: what the GPU repair loop (gpuHealth.repair, mode act) may do in Azure, and as whom.

A user-assigned managed identity of its own, federated with the loop's Kubernetes service account
(Entra Workload ID: the cluster's OIDC issuer, subject system:serviceaccount:<namespace>:aksgpu-gpu-repair),
and two custom roles with exactly the actions the loop calls: the reimage of a VMSS instance, on the
cluster's node resource group (where AKS puts the node pools' scale sets; AKS has no reimage of one
node), and the delete of a node through AKS (agentPools/deleteMachines), on the cluster. Nothing else:
not the cluster's identities, which every node or the control plane holds, and no delete through
Microsoft.Compute, a direct change of the node resource group that AKS does not support
(docs/guides/repair.md)."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
from pulumi_azure_native import managedidentity

from aksgpu.components.roles import assign_role, custom_role
from aksgpu.spec import ClusterSpec, names

# The loop's calls (aksgpu/node/repair_azure.py) and the operation each needs (Azure resource
# provider operations: https://learn.microsoft.com/azure/role-based-access-control/permissions/compute
# and .../permissions/containers, "Deletes machines"; checked 2026-11-27). Only the operations the loop
# calls: Azure Resource Manager authorizes a POST by its action alone, and the loop reads nothing first.
REIMAGE_ACTIONS = ["Microsoft.Compute/virtualMachineScaleSets/virtualMachines/reimage/action"]  # node resource group
DELETE_ACTIONS = ["Microsoft.ContainerService/managedClusters/agentPools/deleteMachines/action"]  # the cluster
REPAIR_ACTIONS = [*REIMAGE_ACTIONS, *DELETE_ACTIONS]
SERVICE_ACCOUNT = "aksgpu-gpu-repair"  # components/kubernetes/gpu_repair.py REPAIR
# The audience Entra Workload ID tokens carry (https://learn.microsoft.com/en-us/azure/aks/workload-identity-overview).
TOKEN_AUDIENCE = "api://AzureADTokenExchange"


@dataclass
class RepairIdentityArgs:
    spec: ClusterSpec
    resource_group_name: pulumi.Input[str]
    subscription_id: pulumi.Input[str]
    oidc_issuer_url: pulumi.Input[str]
    namespace: str
    cluster: pulumi.Resource  # the node resource group exists once the cluster does


class RepairIdentity(pulumi.ComponentResource):
    """The repair loop's managed identity, its federated credential and its two custom roles."""

    client_id: pulumi.Output[str]
    cluster_id: pulumi.Output[str]
    """The managed cluster's resource ID: where the loop deletes nodes (its CronJob's --cluster-id)."""

    def __init__(self, name: str, args: RepairIdentityArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("aksgpu:index:RepairIdentity", name, None, opts)
        spec = args.spec
        child = pulumi.ResourceOptions(parent=self)
        identity = managedidentity.UserAssignedIdentity(
            f"{name}-identity", resource_name_=names.identity(spec.name, "gpu-repair"),
            resource_group_name=args.resource_group_name, location=spec.location, tags=spec.tags, opts=child)
        managedidentity.FederatedIdentityCredential(
            f"{name}-federation", federated_identity_credential_resource_name="aksgpu-gpu-repair",
            resource_name_=identity.name, resource_group_name=args.resource_group_name,
            issuer=args.oidc_issuer_url, subject=f"system:serviceaccount:{args.namespace}:{SERVICE_ACCOUNT}",
            audiences=[TOKEN_AUDIENCE], opts=child)
        node_group = names.node_resource_group(spec.resource_group.name, spec.name)
        scope = pulumi.Output.concat("/subscriptions/", args.subscription_id, "/resourceGroups/", node_group)
        role = custom_role(
            f"{name}-role",
            # Role names are unique in a tenant: the subscription and node resource group make it so.
            role_name=pulumi.Output.concat("aksgpu GPU node repair ", node_group, " ", args.subscription_id),
            description=f"aksgpu: reimage the VMSS instances of failed GPU nodes of cluster {spec.name}",
            actions=REIMAGE_ACTIONS, scope=scope, parent=self, depends_on=[args.cluster])
        assign_role(f"{name}-assignment", role="aksgpu GPU node repair (custom)", role_definition_id=role.id,
                    principal_id=identity.principal_id, principal_type="ServicePrincipal", scope=scope,
                    subscription_id=args.subscription_id, parent=self, depends_on=[role])
        # The cluster's ID from its parts (the cluster's resource name is spec.name: components/cluster.py).
        cluster_id = pulumi.Output.concat("/subscriptions/", args.subscription_id, "/resourceGroups/",
                                          args.resource_group_name,
                                          "/providers/Microsoft.ContainerService/managedClusters/", spec.name)
        delete_role = custom_role(
            f"{name}-delete-role",
            role_name=pulumi.Output.concat("aksgpu GPU node delete ", node_group, " ", args.subscription_id),
            description=f"aksgpu: delete failed GPU nodes of cluster {spec.name} through AKS (deleteMachines)",
            actions=DELETE_ACTIONS, scope=cluster_id, parent=self, depends_on=[args.cluster])
        assign_role(f"{name}-delete-assignment", role="aksgpu GPU node delete (custom)",
                    role_definition_id=delete_role.id, principal_id=identity.principal_id,
                    principal_type="ServicePrincipal", scope=cluster_id, subscription_id=args.subscription_id,
                    parent=self, depends_on=[delete_role])
        self.client_id = identity.client_id
        self.cluster_id = cluster_id
        self.register_outputs({"clientId": identity.client_id, "clusterId": cluster_id})
