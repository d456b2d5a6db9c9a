"""Who signs in and what they may do: Entra ID (AAD), Kubernetes or Azure RBAC, teams."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field

from .base import Guid, Issue, SpecModel, checked

if TYPE_CHECKING:
    from . import ClusterSpec

TEAM_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
TeamName = Annotated[
    str,
    checked(TEAM_NAME.fullmatch, "must be a DNS label: lowercase letters, digits and '-', at most 63",
            'write it like "ml-research"'),
]


class Aad(SpecModel):
    """Entra ID (AAD) sign-in, managed by AKS."""

    enabled: bool = True
    """Sign in to the cluster with Entra ID (AKS-managed integration). Needed for azure-rbac and teams; AKS cannot turn it off once on."""
    tenant_id: Guid | None = None
    """Entra tenant that signs users in. None: the tenant of the deployment subscription."""
    admin_group_object_ids: list[Guid] = Field(default_factory=list)
    """Object IDs of the Entra groups that are cluster admins; aksgpu also lets them fetch credentials (and, with azure-rbac, grants them RBAC Cluster Admin)."""


class Team(SpecModel):
    """A team: its Entra ID groups may fetch credentials; its pools carry its taint."""

    name: TeamName
    """Name of the team, a DNS label (lowercase letters, digits and '-', at most 63), unique. Pools name it in team; with azure-rbac it is also the namespace the team may write to."""
    group_object_ids: list[Guid] = Field(default_factory=list)
    """Object IDs of the team's Entra groups; they may fetch cluster credentials and, with azure-rbac, get RBAC Writer on the team's namespace."""


class Access(SpecModel):
    """Sign-in and authorization for the cluster."""

    aad: Aad = Aad()
    """Entra ID (AAD) sign-in."""
    authorization: Literal["kubernetes-rbac", "azure-rbac"] = "kubernetes-rbac"
    """What decides a signed-in user's rights in the cluster: kubernetes-rbac (Kubernetes Roles and RoleBindings) or azure-rbac (Azure role assignments, needs aad.enabled)."""
    local_accounts: bool = False
    """Keep AKS's local accounts (a static admin kubeconfig). false disables them, so aad.enabled must be on or nobody could sign in."""
    oidc_issuer: bool = True
    """Publish an OIDC issuer URL for the cluster's service account tokens; workloadIdentity needs it."""
    workload_identity: bool = True
    """Let pods use Entra Workload ID (federated identity credentials on service accounts); needs oidcIssuer."""
    teams: list[Team] = Field(default_factory=list)
    """Teams whose Entra groups may use the cluster and whose pools carry their taint; needs aad.enabled."""


def check_access(spec: ClusterSpec) -> Iterator[Issue]:
    access = spec.access
    if access.authorization == "azure-rbac" and not access.aad.enabled:
        yield Issue("access.authorization", "azure-rbac", "Azure RBAC for Kubernetes needs Entra ID sign-in",
                    "set access.aad.enabled: true, or authorization: kubernetes-rbac")
    if not access.local_accounts and not access.aad.enabled:
        yield Issue("access.localAccounts", False,
                    "with local accounts disabled and Entra ID off, nobody could sign in to the cluster",
                    "set access.aad.enabled: true (recommended), or localAccounts: true")
    if access.workload_identity and not access.oidc_issuer:
        yield Issue("access.workloadIdentity", True, "workload identity needs the OIDC issuer",
                    "set access.oidcIssuer: true")
    if access.aad.enabled and not access.aad.admin_group_object_ids and not access.local_accounts:
        yield Issue("access.aad.adminGroupObjectIds", [],
                    "no Entra ID group is cluster admin, so only Azure-level owners can manage the cluster",
                    "add the object ID of your platform team's group", "warning")
    if access.teams and not access.aad.enabled:
        yield Issue("access.teams", [t.name for t in access.teams], "team access is granted to Entra ID groups",
                    "set access.aad.enabled: true")
    names = [team.name for team in access.teams]
    for index, name in enumerate(names):
        if names.index(name) != index:
            yield Issue(f"access.teams[{index}].name", name, "team names must be unique", "merge the two entries")
