"""Azure role assignments, the one way every component grants access, and the custom roles that
grant exactly what a component needs where no built-in role does."""

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
    role_definition_id: pulumi.Input[str] | None = None,
) -> authorization.RoleAssignment:
    """Grant built-in `role` (or the custom role `role_definition_id`, its full ID) to a principal on `scope`.

    principalType is always given: for a just-created managed identity it spares the
    assignment Entra ID's replication delay (PrincipalNotFound).
    """
    if role_definition_id is None:
        role_definition_id = pulumi.Output.concat(
            "/subscriptions/", subscription_id, "/providers/Microsoft.Authorization/roleDefinitions/",
            catalog.role_id(role))
    return authorization.RoleAssignment(
        name,
        principal_id=principal_id,
        principal_type=principal_type,
        role_definition_id=role_definition_id,
        scope=scope,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=depends_on or []),
    )


def custom_role(
    name: str,
    *,
    role_name: pulumi.Input[str],
    description: str,
    actions: list[str],
    scope: pulumi.Input[str],
    parent: pulumi.Resource,
    depends_on: list[pulumi.Resource] | None = None,
) -> authorization.RoleDefinition:
    """A custom role of exactly `actions`, defined and assignable on `scope` only."""
    return authorization.RoleDefinition(
        name,
        role_name=role_name,
        description=description,
        role_type="CustomRole",
        permissions=[{"actions": list(actions), "not_actions": []}],
        assignable_scopes=[scope],
        scope=scope,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=depends_on or []),
    )
