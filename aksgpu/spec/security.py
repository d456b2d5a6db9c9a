"""Cluster-wide security settings: Defender for Containers, the Azure Policy add-on, the Key Vault
secrets provider, the image cleaner and run command. Each has the rule of aksgpu's policy pack
(aksgpu/policy/rules.yaml) that wants it named in its description."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from aksgpu import catalog

from aksgpu.spec import names
from aksgpu.spec.base import Issue, SpecModel
from aksgpu.spec.resource_ids import KeyId, ResourceId, check_id, check_key_id, parse, parse_key_id

if TYPE_CHECKING:
    from aksgpu.spec import ClusterSpec

# The secrets store CSI driver reads a Go duration: "2m", "30s", "1h".
POLL_INTERVAL = re.compile(r"^[1-9][0-9]{0,3}[smh]$")
VAULT_TYPE = "Microsoft.KeyVault/vaults"
DISK_ENCRYPTION_SET_TYPE = "Microsoft.Compute/diskEncryptionSets"
# Key Vault sends a near-expiry notification (Event Grid) this many days before a key version
# expires (the rotation policy's notify action aksgpu adds).
KEY_NOTIFY_DAYS = 30


class Kms(SpecModel):
    """KMS encryption of Kubernetes secrets in etcd with a key in Azure Key Vault (a customer key)."""

    mode: Literal["none", "create", "existing"] = "none"
    """create: aksgpu creates a Key Vault (Azure RBAC, purge protection) and an RSA key, and grants the control-plane identity what KMS needs; existing: the key given by keyId in the vault given by keyVaultId (Azure RBAC), which aksgpu grants the same; none: AKS's platform encryption only (policy aks-kms). Deleting the key, vault or identity later makes the cluster's secrets unreadable."""
    network_access: Literal["Private", "Public"] = "Private"
    """Private: the vault has no public access and AKS reaches it through a private link it creates (needs controlPlane.apiServer.vnetIntegration); Public: the vault is reachable from every network (KMS does not support a vault firewall). Cannot change while KMS is on."""
    hsm: bool = True
    """Keys aksgpu creates (this KMS key and a disk encryption set's) are HSM-protected RSA-HSM keys in a Premium vault (policy kv-key-hsm; checkov CKV_AZURE_112); false: software-protected RSA keys in a Standard vault. Mode create only; changing it replaces the vault's keys, which KMS does not survive."""
    key_rotation_days: int = 365
    """Days after creation at which Key Vault makes a new version of each key aksgpu creates (the keys' rotation policy; PSRule Azure.KeyVault.AutoRotationPolicy): at least 7 (Key Vault's minimum). The disk encryption set moves to the new version by itself; KMS keeps the version it was given until `aksgpu up --refresh` moves it to the newest (docs/guides/security.md). Mode create only; applied when the key is created (see the guide for keys that exist)."""
    key_expiry_days: int = 730
    """Days each new key version lives before it expires (the rotation policy's expiryTime; checkov CKV_AZURE_40): at least 28 (Key Vault's minimum) and at least keyRotationDays + 30, so the new version exists before the near-expiry notification 30 days ahead. An expired version stops KMS from encrypting: move the cluster to the newest version before then. Mode create only."""
    key_vault_name: str | None = None
    """Name of the vault aksgpu creates: 3-24 letters, digits and '-', unique across Azure (<name>.vault.azure.net). `aksgpu render` writes it into the stack file: a name set here as written; for a new environment "<cluster name, cut>-kms-" and six characters from a hash of the resource group, location and cluster name, so environments with the same cluster name differ; an environment rendered before keeps the name it has ("<cluster name>-kms", cut to 24: None in a stack file means that name). Changing it replaces the vault and its keys, which KMS does not survive; purge protection keeps a deleted vault's name taken for 90 days."""
    key_vault_id: str | None = None
    """Resource ID of an existing vault (mode existing): /subscriptions/<subscription GUID>/resourceGroups/<group>/providers/Microsoft.KeyVault/vaults/<name>."""
    key_id: str | None = None
    """Versioned identifier of an existing key (mode existing), https://<vault>.vault.azure.net/keys/<name>/<version>; rotate by changing it to a new version."""


class DiskEncryption(SpecModel):
    """Encryption of the nodes' OS disks and of persistent volumes with a customer key, through a
    disk encryption set (policy aks-disk-encryption-set)."""

    mode: Literal["none", "create", "existing"] = "none"
    """create: aksgpu creates a disk encryption set with its own RSA key in the Key Vault it creates for KMS (needs security.kms.mode create), moving to each new key version by itself, and grants it the key; existing: the disk encryption set given by diskEncryptionSetId (same region; its identity must already hold Key Vault Crypto Service Encryption User on its key); none: Azure's platform keys. AKS takes it only when the cluster is created: changing it replaces the cluster. It encrypts every pool's OS disks (ephemeral ones get a new key version only when re-imaged) and, by default, the data disks AKS's storage classes create; temp disks are covered by encryption at host."""
    disk_encryption_set_id: str | None = None
    """Resource ID of an existing disk encryption set (mode existing): /subscriptions/<subscription GUID>/resourceGroups/<group>/providers/Microsoft.Compute/diskEncryptionSets/<name>."""


class KeyVaultSecretsProvider(SpecModel):
    """The Azure Key Vault provider for the Secrets Store CSI driver (an AKS add-on)."""

    enabled: bool = True
    """Turn the add-on on: pods mount Key Vault secrets as files (policy aks-secret-store)."""
    rotation: bool = True
    """Re-read mounted secrets from Key Vault every rotationPollInterval (policy aks-secret-rotation)."""
    rotation_poll_interval: str = "2m"
    """How often rotation re-reads secrets, a duration such as "2m", "30s" or "1h"."""


class Security(SpecModel):
    """Threat detection, policy enforcement, secrets and node hygiene for the whole cluster."""

    defender: bool = True
    """Microsoft Defender for Containers' sensor, reporting to the cluster's Log Analytics workspace (policy aks-defender). Defender for Containers must also be on in the subscription's Defender plans for alerts."""
    azure_policy: bool = True
    """The Azure Policy add-on, which enforces the Azure Policy assignments that target the cluster (policy aks-azure-policy)."""
    key_vault_secrets_provider: KeyVaultSecretsProvider = KeyVaultSecretsProvider()
    """The Key Vault secrets provider add-on and its rotation."""
    image_cleaner_hours: int | None = Field(default=168, ge=24, le=2160)
    """Hours (24-2160) between image cleaner runs, which remove unused images with known vulnerabilities from nodes (policy aks-image-cleaner). None: off."""
    run_command: bool = False
    """Allow `az aks command invoke`, which runs a privileged pod for anyone with the Azure action (policy aks-run-command)."""
    kms: Kms = Kms()
    """KMS encryption of Kubernetes secrets with a customer key in Azure Key Vault."""
    disk_encryption: DiskEncryption = DiskEncryption()
    """Customer-key encryption of managed OS disks and persistent volumes (a disk encryption set)."""


def check_security(spec: ClusterSpec) -> Iterator[Issue]:
    security = spec.security
    if security.defender and spec.monitoring.log_analytics.mode == "none":
        yield Issue("security.defender", True, "Defender for Containers reports to a Log Analytics workspace",
                    "set monitoring.logAnalytics.mode to create or existing, or security.defender: false")
    provider = security.key_vault_secrets_provider
    if provider.rotation and not provider.enabled:
        yield Issue("security.keyVaultSecretsProvider.rotation", True, "rotation is a setting of the enabled add-on",
                    "set keyVaultSecretsProvider.enabled: true, or rotation: false")
    yield from _check_kms(spec)
    yield from _check_disk_encryption(spec)
    if not POLL_INTERVAL.fullmatch(provider.rotation_poll_interval):
        yield Issue("security.keyVaultSecretsProvider.rotationPollInterval", provider.rotation_poll_interval,
                    "must be a duration of 1-9999 seconds, minutes or hours, such as \"2m\"",
                    'write it as a number and s, m or h, e.g. "2m"')


def key_vault_name(spec: ClusterSpec) -> str:
    """The name of the KMS vault aksgpu creates. A spec without keyVaultName (a stack rendered
    before aksgpu wrote the name in) keeps the suffix-less name (environments/global_names.py)."""
    kms = spec.security.kms
    if kms.key_vault_name:
        return kms.key_vault_name
    return names.legacy_key_vault(spec.name)


def _check_kms(spec: ClusterSpec) -> Iterator[Issue]:
    kms = spec.security.kms
    if kms.mode == "none":
        for field, value in (("keyVaultName", kms.key_vault_name), ("keyVaultId", kms.key_vault_id), ("keyId", kms.key_id)):
            if value is not None:
                yield Issue(f"security.kms.{field}", value, "is a setting of KMS, which is off (mode none)",
                            "remove it, or set security.kms.mode")
        return
    if kms.network_access == "Private" and not spec.control_plane.api_server.vnet_integration:
        yield Issue("security.kms.networkAccess", "Private", "KMS reaches a private vault only through API server "
                    "VNet integration", "set controlPlane.apiServer.vnetIntegration: true, or networkAccess: Public")
    if kms.mode == "create":
        name = key_vault_name(spec)
        yield from names.check_name("security.kms.keyVaultName", name, VAULT_TYPE, "set keyVaultName to such a name")
        for field, value in (("keyVaultId", kms.key_vault_id), ("keyId", kms.key_id)):
            if value is not None:
                yield Issue(f"security.kms.{field}", value, "is for mode existing; aksgpu creates the vault and key",
                            "remove it, or set mode: existing")
    else:
        yield from check_id("security.kms.keyVaultId", kms.key_vault_id, VAULT_TYPE)
        yield from check_key_id("security.kms.keyId", kms.key_id)
        vault = parse(kms.key_vault_id) if kms.key_vault_id is not None else None
        key = parse_key_id(kms.key_id) if kms.key_id is not None else None
        if isinstance(vault, ResourceId) and isinstance(key, KeyId) and key.vault.lower() != vault.name.lower():
            yield Issue("security.kms.keyId", kms.key_id, f"the key is not in the vault keyVaultId names ({vault.name})",
                        "give a key of that vault, or that key's vault")
        if kms.key_vault_name is not None:
            yield Issue("security.kms.keyVaultName", kms.key_vault_name, "is for mode create",
                        "remove it; keyVaultId names the existing vault")
        if not kms.hsm:
            yield Issue("security.kms.hsm", False, "is a setting of the vault and keys aksgpu creates (mode create)",
                        "remove it; the existing key's type is set in its vault")
        for field in ("key_rotation_days", "key_expiry_days"):
            if field in kms.model_fields_set:
                name = "keyRotationDays" if field == "key_rotation_days" else "keyExpiryDays"
                yield Issue(f"security.kms.{name}", getattr(kms, field), "is a setting of the keys aksgpu creates (mode "
                            "create)", "remove it; set the rotation policy of the existing key in its vault")
        return
    yield from _check_key_rotation(kms)


def _check_key_rotation(kms: Kms) -> Iterator[Issue]:
    """Key Vault's rules for a rotation policy (aks_limits.yaml, keyRotation) and aksgpu's own."""
    rules = catalog.limit("keyRotation")
    rotate, expiry = kms.key_rotation_days, kms.key_expiry_days
    if rotate < rules["minRotateAfterCreateDays"]:
        yield Issue("security.kms.keyRotationDays", rotate,
                    f"Key Vault rotates a key at least {rules['minRotateAfterCreateDays']} days after creation",
                    f"set keyRotationDays to {rules['minRotateAfterCreateDays']} or more (default 365)")
    if expiry < rules["minExpiryDays"]:
        yield Issue("security.kms.keyExpiryDays", expiry,
                    f"Key Vault wants a key version to live at least {rules['minExpiryDays']} days",
                    f"set keyExpiryDays to {rules['minExpiryDays']} or more (default 730)")
    elif expiry < rotate + KEY_NOTIFY_DAYS:
        yield Issue("security.kms.keyExpiryDays", expiry,
                    f"must be at least keyRotationDays + {KEY_NOTIFY_DAYS} ({rotate + KEY_NOTIFY_DAYS}): the new "
                    f"version must exist before the near-expiry notification {KEY_NOTIFY_DAYS} days ahead, and "
                    f"Key Vault rotates no later than {rules['minRotateBeforeExpiryDays']} days before expiry",
                    f"set keyExpiryDays to {rotate + KEY_NOTIFY_DAYS} or more, or lower keyRotationDays")


def _check_disk_encryption(spec: ClusterSpec) -> Iterator[Issue]:
    disks = spec.security.disk_encryption
    field = "security.diskEncryption.diskEncryptionSetId"
    if disks.mode == "existing":
        yield from check_id(field, disks.disk_encryption_set_id, DISK_ENCRYPTION_SET_TYPE)
        return
    if disks.disk_encryption_set_id is not None:
        yield Issue(field, disks.disk_encryption_set_id, f"is for mode existing, not {disks.mode}",
                    "remove it, or set security.diskEncryption.mode: existing")
    if disks.mode == "create" and spec.security.kms.mode != "create":
        yield Issue("security.diskEncryption.mode", "create",
                    "the disk key is kept in the Key Vault aksgpu creates for KMS, and KMS does not create one "
                    f"(security.kms.mode is {spec.security.kms.mode})",
                    "set security.kms.mode: create, or give an existing disk encryption set (mode existing)")
