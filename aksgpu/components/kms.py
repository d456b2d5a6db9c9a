"""KMS encryption of the cluster's Kubernetes secrets with a customer key: the Key Vault and key
(or an existing pair) and the control-plane identity's access, declared as children of the Cluster
component, which owns that identity and must grant it before the cluster exists."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi
from pulumi_azure_native import keyvault, monitor

from aksgpu import catalog
from aksgpu.components.roles import assign_role
from aksgpu.spec import ClusterSpec
from aksgpu.spec.security import KEY_NOTIFY_DAYS, key_vault_name

KMS_KEY_NAME = "aks-kms"
# What the vault sends to the cluster's workspace (PSRule for Azure Azure.KeyVault.Logs): Key
# Vault's audit log, AuditEvent (the one category of its audit category group), and the metrics.
VAULT_LOG_CATEGORY = "AuditEvent"


def rotation_policy(spec: ClusterSpec) -> dict[str, Any]:
    """The rotation policy of a key aksgpu creates (Microsoft.KeyVault 2024-11-01 keys.json,
    RotationPolicy): a new version keyRotationDays after each version's creation, each new version
    expiring keyExpiryDays after its own creation (relative, so the plan has no timestamp), and a
    near-expiry notification. The expiry is what checkov's CKV_AZURE_40 reads
    (properties/rotationPolicy/attributes/expiryTime; bridgecrewio/checkov @03d5fdad8d,
    checkov/arm/checks/resource/KeyExpirationDate.py). Key Vault sets no expiry on the first
    version: `expiryTime` applies to rotated versions only (learn.microsoft.com/azure/key-vault/keys/
    how-to-configure-key-rotation, read 2026-11-27)."""
    kms = spec.security.kms
    return {
        "attributes": {"expiry_time": f"P{kms.key_expiry_days}D"},
        "lifetime_actions": [
            {"trigger": {"time_after_create": f"P{kms.key_rotation_days}D"}, "action": {"type": "rotate"}},
            {"trigger": {"time_before_expiry": f"P{KEY_NOTIFY_DAYS}D"}, "action": {"type": "notify"}},
        ],
    }


def vault_key(resource_name: str, key_name: str, vault: keyvault.Vault, spec: ClusterSpec,
              resource_group_name: pulumi.Input[str], opts: pulumi.ResourceOptions) -> keyvault.Key:
    """An RSA key aksgpu creates in the KMS vault: RSA-HSM with security.kms.hsm (aks_limits.yaml, kms)."""
    facts = catalog.limit("kms")
    return keyvault.Key(
        resource_name,
        key_name=key_name,
        vault_name=vault.name,
        resource_group_name=resource_group_name,
        properties={"kty": facts["hsmKeyType"] if spec.security.kms.hsm else facts["keyType"],
                    "key_size": facts["keySize"], "rotation_policy": rotation_policy(spec)},
        tags=spec.tags,
        opts=opts,
    )


@dataclass
class SecretsEncryption:
    """What KMS adds to the cluster: its securityProfile.azureKeyVaultKms (None: KMS off), the role
    assignments the cluster must wait for (AKS checks the identity's access when KMS is turned on),
    and the vault aksgpu created (None unless mode create), which the disk encryption set's key
    shares."""

    profile: dict[str, Any] | None = None
    grants: list[pulumi.Resource] = field(default_factory=list)
    vault: keyvault.Vault | None = None


def secrets_encryption(
    name: str,
    spec: ClusterSpec,
    *,
    parent: pulumi.Resource,
    resource_group_name: pulumi.Input[str],
    tenant_id: pulumi.Input[str],
    subscription_id: pulumi.Input[str],
    principal_id: pulumi.Input[str],
    workspace_id: pulumi.Input[str] | None = None,
) -> SecretsEncryption:
    """KMS for the cluster's secrets, as spec.security.kms asks; the vault aksgpu creates sends its
    audit logs and metrics to the Log Analytics workspace `workspace_id` (None: no workspace)."""
    kms = spec.security.kms
    if kms.mode == "none":
        return SecretsEncryption()
    private = kms.network_access == "Private"
    child = pulumi.ResourceOptions(parent=parent, protect=spec.protect)
    vault: keyvault.Vault | None = None
    if kms.mode == "create":
        vault = keyvault.Vault(
            f"{name}-kms-vault",
            vault_name=key_vault_name(spec),
            resource_group_name=resource_group_name,
            location=spec.location,
            properties={
                "tenant_id": tenant_id,
                # HSM-protected keys need the Premium SKU (security.kms.hsm).
                "sku": {"family": "A", "name": "premium" if kms.hsm else "standard"},
                "enable_rbac_authorization": True,
                # Losing the key loses every secret in etcd: it can be neither purged nor lost.
                "enable_soft_delete": True,
                "soft_delete_retention_in_days": 90,
                "enable_purge_protection": True,
                # KMS supports no vault firewall: private (AKS adds a private link) or open.
                "public_network_access": "Disabled" if private else "Enabled",
                "network_acls": {"default_action": "Deny" if private else "Allow", "bypass": "AzureServices"},
            },
            tags=spec.tags,
            opts=child,
        )
        key = vault_key(f"{name}-kms-key", KMS_KEY_NAME, vault, spec, resource_group_name, child)
        if workspace_id is not None:
            vault_diagnostics(name, vault, workspace_id, parent)
        vault_id: pulumi.Input[str] = vault.id
        key_id: pulumi.Input[str] = key.key_uri_with_version
    else:
        vault_id, key_id = kms.key_vault_id or "", kms.key_id or ""
    # What KMS needs of the control-plane identity (aksgpu/catalog/aks_limits.yaml, source kms).
    grants: list[pulumi.Resource] = [assign_role(
        f"{name}-kms-key-vault-crypto-user", role="Key Vault Crypto User", principal_id=principal_id,
        principal_type="ServicePrincipal", scope=vault_id, subscription_id=subscription_id, parent=parent)]
    if private:
        grants.append(assign_role(
            f"{name}-kms-key-vault-contributor", role="Key Vault Contributor", principal_id=principal_id,
            principal_type="ServicePrincipal", scope=vault_id, subscription_id=subscription_id, parent=parent))
    profile: dict[str, Any] = {"enabled": True, "key_id": key_id, "key_vault_network_access": kms.network_access}
    if private:
        profile["key_vault_resource_id"] = vault_id
    return SecretsEncryption(profile, grants, vault)


def vault_diagnostics(name: str, vault: keyvault.Vault, workspace_id: pulumi.Input[str],
                      parent: pulumi.Resource) -> monitor.DiagnosticSetting:
    """Who used which key when: the vault's audit logs and metrics in the cluster's workspace, as
    the control plane's are (monitoring.py). AuditEvent: every authenticated request to the vault
    (learn.microsoft.com/azure/key-vault/general/logging, read 2026-11-27), the category PSRule
    for Azure's Azure.KeyVault.Logs looks for."""
    return monitor.DiagnosticSetting(
        f"{name}-kms-vault-logs",
        name="aksgpu-key-vault",
        resource_uri=vault.id,
        workspace_id=workspace_id,
        logs=[{"category": VAULT_LOG_CATEGORY, "enabled": True}],
        metrics=[{"category": "AllMetrics", "enabled": True}],
        opts=pulumi.ResourceOptions(parent=parent),
    )
