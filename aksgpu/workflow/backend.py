"""`aksgpu backend bootstrap`: a team state backend on Azure (a storage account for Pulumi state,
a Key Vault key for its secrets, the role assignments to use them) as Azure CLI steps, printed as
a script or run with --apply. Standard library only at import.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

from aksgpu.errors import Problem, UserError
from aksgpu.workflow.az_steps import (
    CONTAINER_NAME,
    KEY_NAME,
    STORAGE_ACCOUNT_NAME,
    AzStep,
    AzStepFailed,
    key_vault_name_rule,
    run_steps,
    step_script_lines,
)

_RESOURCE_GROUP = re.compile(r"^[-\w.()]{0,89}[-\w()]$")
_LOCATION = re.compile(r"^[a-z][a-z0-9]*$")
_ASSIGNEE = re.compile(r"^[A-Za-z0-9@._+#-]+$")  # object IDs, app IDs, UPNs (guests: ...#EXT#@...)
STORAGE_SKUS = ("Standard_LRS", "Standard_ZRS", "Standard_GRS", "Standard_GZRS", "Standard_RAGRS", "Standard_RAGZRS")


@dataclass(frozen=True)
class BootstrapSettings:
    resource_group: str
    location: str
    storage_account: str
    container: str
    key_vault: str
    key: str = "pulumi-secrets"
    assignee: str | None = None
    """Who gets data access (a user, group or service principal: object ID, UPN or app ID); None: you."""
    sku: str = "Standard_LRS"
    retention_days: int = 30

    @property
    def backend_url(self) -> str:
        return f"azblob://{self.container}?storage_account={self.storage_account}"

    @property
    def secrets_provider(self) -> str:
        return f"azurekeyvault://{self.key_vault}.vault.azure.net/keys/{self.key}"


def bootstrap_problems(settings: BootstrapSettings) -> list[Problem]:
    """Each name that breaks Azure's naming rules, with the rule and a fix."""
    checks = [
        ("--resource-group", settings.resource_group, _RESOURCE_GROUP,
         "must be 1-90 letters, digits, '-', '_', '.', '(' or ')', not ending in '.'", "rg-pulumi-state"),
        ("--location", settings.location, _LOCATION,
         "must be an Azure region name in lowercase without spaces", "eastus2"),
        ("--storage-account", settings.storage_account, STORAGE_ACCOUNT_NAME,
         "must be 3-24 lowercase letters and digits (no '-'), unique across Azure", "stpulumistate7f3a"),
        ("--container", settings.container, CONTAINER_NAME,
         "must be 3-63 lowercase letters, digits and single hyphens, starting and ending with a letter or digit",
         "pulumi-state"),
        ("--key-vault", settings.key_vault, key_vault_name_rule(),
         "must be 3-24 letters, digits and single hyphens, starting with a letter and ending with a letter or "
         "digit, unique across Azure", "kv-pulumi-7f3a"),
        ("--key", settings.key, KEY_NAME, "must be 1-127 letters, digits and hyphens", "pulumi-secrets"),
    ]
    problems = [Problem(option, value, rule, f"e.g. {option} {example}")
                for option, value, pattern, rule, example in checks if not pattern.fullmatch(value)]
    if settings.sku not in STORAGE_SKUS:
        problems.append(Problem("--sku", settings.sku, f"must be one of {', '.join(STORAGE_SKUS)}",
                                "e.g. --sku Standard_ZRS"))
    if not 1 <= settings.retention_days <= 365:
        problems.append(Problem("--retention-days", settings.retention_days,
                                "must be 1-365 (Azure's soft-delete range)", "e.g. --retention-days 30"))
    if settings.assignee is not None and not _ASSIGNEE.fullmatch(settings.assignee):
        problems.append(Problem("--assignee", settings.assignee, "must be an object ID, UPN or app ID (letters, "
                                "digits and @ . _ - + #)", "e.g. --assignee ci-bot@contoso.com"))
    return problems


def bootstrap_steps(settings: BootstrapSettings) -> list[AzStep]:
    """The az commands that create a storage account for Pulumi state and a Key Vault key for secrets."""
    s = settings
    group_scope = f"/subscriptions/${{SUBSCRIPTION_ID}}/resourceGroups/{s.resource_group}/providers"
    account_scope = f"{group_scope}/Microsoft.Storage/storageAccounts/{s.storage_account}"
    vault_scope = f"{group_scope}/Microsoft.KeyVault/vaults/{s.key_vault}"
    assignee = (["--assignee", s.assignee] if s.assignee else
                ["--assignee-object-id", "${SIGNED_IN_USER_ID}", "--assignee-principal-type", "User"])
    who = s.assignee or "you"
    return [
        AzStep("the subscription everything goes into (`az account set` chooses another)",
               ["az", "account", "show", "--query", "id", "--output", "tsv"], capture="SUBSCRIPTION_ID"),
        AzStep("your object ID, for the role assignments",
               ["az", "ad", "signed-in-user", "show", "--query", "id", "--output", "tsv"], capture="SIGNED_IN_USER_ID"),
        AzStep(f"resource group {s.resource_group}",
               ["az", "group", "create", "--name", s.resource_group, "--location", s.location, "--output", "none"]),
        AzStep(f"storage account {s.storage_account}: TLS 1.2, no anonymous blob access, no shared keys "
               "(Entra ID only)",
               ["az", "storage", "account", "create", "--name", s.storage_account, "--resource-group", s.resource_group,
                "--location", s.location, "--kind", "StorageV2", "--sku", s.sku, "--min-tls-version", "TLS1_2",
                "--https-only", "true", "--allow-blob-public-access", "false", "--allow-shared-key-access", "false",
                "--output", "none"]),
        AzStep(f"blob versioning and {s.retention_days}-day soft delete: the way back from a damaged state file",
               ["az", "storage", "account", "blob-service-properties", "update", "--account-name", s.storage_account,
                "--resource-group", s.resource_group, "--enable-versioning", "true",
                "--enable-delete-retention", "true", "--delete-retention-days", str(s.retention_days),
                "--enable-container-delete-retention", "true",
                "--container-delete-retention-days", str(s.retention_days), "--output", "none"]),
        AzStep(f"container {s.container} (through Azure Resource Manager, so no data-plane role is needed yet)",
               ["az", "storage", "container-rm", "create", "--storage-account", s.storage_account,
                "--resource-group", s.resource_group, "--name", s.container, "--output", "none"]),
        AzStep(f"key vault {s.key_vault}: Azure RBAC authorization, purge protection",
               ["az", "keyvault", "create", "--name", s.key_vault, "--resource-group", s.resource_group,
                "--location", s.location, "--enable-rbac-authorization", "true", "--enable-purge-protection", "true",
                "--output", "none"]),
        AzStep("Key Vault Crypto Officer for you on the vault, to create the key",
               ["az", "role", "assignment", "create", "--role", "Key Vault Crypto Officer",
                "--assignee-object-id", "${SIGNED_IN_USER_ID}", "--assignee-principal-type", "User",
                "--scope", vault_scope, "--output", "none"]),
        AzStep(f"RSA key {s.key}, only if it does not exist: a new version would orphan the stacks encrypted with "
               "the current one",
               ["az", "keyvault", "key", "create", "--vault-name", s.key_vault, "--name", s.key, "--kty", "RSA",
                "--size", "3072", "--output", "none"],
               unless=["az", "keyvault", "key", "show", "--vault-name", s.key_vault, "--name", s.key,
                       "--output", "none"],
               retries=5),
        AzStep(f"Storage Blob Data Contributor for {who} on the storage account (read and write state)",
               ["az", "role", "assignment", "create", "--role", "Storage Blob Data Contributor", *assignee,
                "--scope", account_scope, "--output", "none"]),
        AzStep(f"Key Vault Crypto User for {who} on the vault (encrypt and decrypt stack secrets)",
               ["az", "role", "assignment", "create", "--role", "Key Vault Crypto User", *assignee,
                "--scope", vault_scope, "--output", "none"]),
    ]


def environments_snippet(settings: BootstrapSettings) -> str:
    return (f"defaults:\n  backend: {settings.backend_url}\n  secretsProvider: {settings.secrets_provider}\n")


def bootstrap_script(settings: BootstrapSettings) -> str:
    """A bash script of the steps, runnable as printed (after `az login`)."""
    lines = ["#!/usr/bin/env bash",
             "# aksgpu backend bootstrap: Azure Blob Storage for Pulumi state, an Azure Key Vault key for its secrets.",
             "# Run it after `az login`, as someone who may create resources and assign roles in the subscription",
             "# (Owner, or Contributor plus User Access Administrator).",
             "set -euo pipefail", ""]
    for number, step in enumerate(bootstrap_steps(settings), start=1):
        lines.append(f"# {number}. {step.description}")
        if step.retries:
            lines.append("#    (a role assignment can take a few minutes to apply: if this says Forbidden, wait a "
                         "minute and run it again)")
        lines += step_script_lines(step)
        lines.append("")
    lines.append("# Then put these lines in stacks/environments.yaml "
                 "(every environment uses them unless it sets its own):")
    lines.append("#")
    lines += [f"#   {line}" for line in environments_snippet(settings).splitlines()]
    return "\n".join(lines) + "\n"


def run_bootstrap(settings: BootstrapSettings, *, say: Callable[[str, str | None], None],
                  run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run,
                  sleep: Callable[[float], None] = time.sleep) -> None:
    """Runs the steps one by one; a failed step is a UserError naming the command and Azure's message."""
    try:
        run_steps(bootstrap_steps(settings), say=say, run=run, sleep=sleep, retry_seconds=60,
                  retry_note="not allowed yet (role assignments take a few minutes to apply)",
                  rerun_fix="correct the cause and run the same `aksgpu backend bootstrap ... --apply` again: "
                            "steps that are done already are safe to repeat.")
    except AzStepFailed as error:
        raise UserError(str(error)) from None
