"""Cluster-wide security settings: Defender for Containers, the Azure Policy add-on, the Key Vault
secrets provider, the image cleaner and run command. Each has the rule of aksgpu's policy pack
(aksgpu/policy/rules.yaml) that wants it named in its description."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from pydantic import Field

from .base import Issue, SpecModel

if TYPE_CHECKING:
    from . import ClusterSpec

# The secrets store CSI driver reads a Go duration: "2m", "30s", "1h".
POLL_INTERVAL = re.compile(r"^[1-9][0-9]{0,3}[smh]$")


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


def check_security(spec: ClusterSpec) -> Iterator[Issue]:
    security = spec.security
    if security.defender and spec.monitoring.log_analytics.mode == "none":
        yield Issue("security.defender", True, "Defender for Containers reports to a Log Analytics workspace",
                    "set monitoring.logAnalytics.mode to create or existing, or security.defender: false")
    provider = security.key_vault_secrets_provider
    if provider.rotation and not provider.enabled:
        yield Issue("security.keyVaultSecretsProvider.rotation", True, "rotation is a setting of the enabled add-on",
                    "set keyVaultSecretsProvider.enabled: true, or rotation: false")
    if not POLL_INTERVAL.fullmatch(provider.rotation_poll_interval):
        yield Issue("security.keyVaultSecretsProvider.rotationPollInterval", provider.rotation_poll_interval,
                    "must be a duration of 1-9999 seconds, minutes or hours, such as \"2m\"",
                    'write it as a number and s, m or h, e.g. "2m"')
