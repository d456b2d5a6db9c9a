"""Customer-key encryption of the nodes' managed OS disks and of persistent volumes: a disk
encryption set with its key (or an existing set) and the access AKS checks when the cluster is
created, declared as children of the Cluster component, which passes the set to the cluster."""

from __future__ import annotations

import pulumi
from pulumi_azure_native import compute, keyvault

from aksgpu.components.kms import vault_key
from aksgpu.components.roles import assign_role
from aksgpu.spec import ClusterSpec, names

DISK_KEY_NAME = "aks-disks"


def disk_encryption_set(
    name: str,
    spec: ClusterSpec,
    *,
    parent: pulumi.Resource,
    vault: keyvault.Vault | None,
    resource_group_name: pulumi.Input[str],
    subscription_id: pulumi.Input[str],
    principal_id: pulumi.Input[str],
) -> tuple[pulumi.Input[str] | None, list[pulumi.Resource]]:
    """The cluster's diskEncryptionSetID (None: platform keys) and the role assignments the cluster
    must wait for. `vault` is the KMS vault aksgpu creates, where a created set keeps its key; the
    spec allows mode create only with it (spec/security.py)."""
    disks = spec.security.disk_encryption
    if disks.mode == "none":
        return None, []
    grants: list[pulumi.Resource] = []
    if disks.mode == "create":
        if vault is None:
            raise ValueError("security.diskEncryption.mode create needs the KMS vault (security.kms.mode create)")
        child = pulumi.ResourceOptions(parent=parent, protect=spec.protect)
        key = vault_key(f"{name}-disks-key", DISK_KEY_NAME, vault, spec, resource_group_name, child)
        encryption_set = compute.DiskEncryptionSet(
            f"{name}-disks",
            disk_encryption_set_name=names.disk_encryption_set(spec.name),
            resource_group_name=resource_group_name,
            location=spec.location,
            # Only a system-assigned identity is supported for new sets (the API's own words).
            identity={"type": "SystemAssigned"},
            encryption_type="EncryptionAtRestWithCustomerKey",
            # The API wants a versioned key URL; the set then follows each new version by itself.
            active_key={"key_url": key.key_uri_with_version, "source_vault": {"id": vault.id}},
            rotation_to_latest_key_version_enabled=True,
            tags=spec.tags,
            opts=child,
        )
        # The set wraps and unwraps disk keys with this one key, so the grant is on the key alone.
        grants.append(assign_role(
            f"{name}-disks-key-access", role="Key Vault Crypto Service Encryption User",
            principal_id=encryption_set.identity.apply(lambda identity: identity.principal_id if identity else ""),
            principal_type="ServicePrincipal", scope=key.id, subscription_id=subscription_id, parent=parent))
        set_id: pulumi.Input[str] = encryption_set.id
    else:
        set_id = disks.disk_encryption_set_id or ""
    # AKS needs to read the set it puts on every node's OS disk (AKS docs, azure-disk-customer-managed-keys).
    grants.append(assign_role(
        f"{name}-disks-reader", role="Reader", principal_id=principal_id, principal_type="ServicePrincipal",
        scope=set_id, subscription_id=subscription_id, parent=parent))
    return set_id, grants
