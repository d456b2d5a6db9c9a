"""Pulumi resources for the plain RBAC objects the components build (ServiceAccount, ClusterRole,
Role, ClusterRoleBinding, RoleBinding), one function for every component that declares its own
service account and rights; and for a ValidatingAdmissionPolicy with its binding."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pulumi
import pulumi_kubernetes as k8s


def declare_rbac(objects: Iterable[dict[str, Any]], resource_name: Callable[[dict[str, Any]], str],
                 opts: pulumi.ResourceOptions, *, chained: bool = False) -> list[pulumi.Resource]:
    """One resource per object, named by `resource_name(obj)`. chained: each waits for the ones before
    it (a binding after its role and account). Service accounts never mount a token by default: the
    pods that use them ask for one."""
    created: list[pulumi.Resource] = []
    for obj in objects:
        kind, meta, name = obj["kind"], obj["metadata"], resource_name(obj)
        options = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=list(created))) \
            if chained else opts
        if kind == "ServiceAccount":
            created.append(k8s.core.v1.ServiceAccount(name, metadata=meta, automount_service_account_token=False,
                                                      opts=options))
        elif kind == "ClusterRole":
            created.append(k8s.rbac.v1.ClusterRole(name, metadata=meta, rules=obj["rules"], opts=options))
        elif kind == "Role":
            created.append(k8s.rbac.v1.Role(name, metadata=meta, rules=obj["rules"], opts=options))
        elif kind == "ClusterRoleBinding":
            created.append(k8s.rbac.v1.ClusterRoleBinding(name, metadata=meta, role_ref=obj["roleRef"],
                                                          subjects=obj["subjects"], opts=options))
        elif kind == "RoleBinding":
            created.append(k8s.rbac.v1.RoleBinding(name, metadata=meta, role_ref=obj["roleRef"],
                                                   subjects=obj["subjects"], opts=options))
        else:
            raise ValueError(f"declare_rbac: {kind} is not an RBAC object")
    return created


def declare_admission_policy(resource_name: str, policy_and_binding: tuple[dict[str, Any], dict[str, Any]],
                             opts: pulumi.ResourceOptions) -> pulumi.Resource:
    """A ValidatingAdmissionPolicy (resource `resource_name`) and its binding (`resource_name`-binding,
    after the policy). Returns the binding: what waits for the policy to take effect waits for it."""
    policy, binding = policy_and_binding
    admission = k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
        resource_name, metadata=policy["metadata"], spec=policy["spec"], opts=opts)
    return k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
        f"{resource_name}-binding", metadata=binding["metadata"], spec=binding["spec"],
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[admission])))
