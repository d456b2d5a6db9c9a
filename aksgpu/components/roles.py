"""Azure role assignments, the one way every component grants access."""

from __future__ import annotations

from typing import Literal

import pulumi
from pulumi_azure_native import authorization

from aksgpu import catalog

PrincipalType = Literal["Group", "ServicePrincipal", "User"]


def assign_role(
    name: str,
    *,
    role: str,
    principal_id: pulumi.Input[str],
    principal_type: PrincipalType,
    scope: pulumi.Input[str],
    subscription_id: pulumi.Input[str],
    parent: pulumi.Resource,
    depends_on: list[pulumi.Resource] | None = None,
) -> authorization.RoleAssignment:
    """Grant built-in `role` to a principal on `scope`.

    principalType is always given: for a just-created managed identity it spares the
    assignment Entra ID's replication delay (PrincipalNotFound).
    """
    role_definition_id = pulumi.Output.concat(
        "/subscriptions/", subscription_id, "/providers/Microsoft.Authorization/roleDefinitions/", catalog.role_id(role)
    )
    return authorization.RoleAssignment(
        name,
        principal_id=principal_id,
        principal_type=principal_type,
        role_definition_id=role_definition_id,
        scope=scope,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=depends_on or []),
    )
