"""Where a stack lives and what it needs before Pulumi can run: its state backend and secrets
provider (from flags, the environment, stacks/environments.yaml and the stack file, in that order),
Azure credentials, the Pulumi CLI, a passphrase or a service token. Standard library only at import.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aksgpu.errors import MISSING, Problem, UserError

if TYPE_CHECKING:
    from aksgpu.project.stackfile import StackFile

DEFAULT_STATE_DIR = ".pulumi-state"
PULUMI_CLOUD_URL = "https://api.pulumi.com"
# Pulumi secrets providers by scheme (pulumi stack init --secrets-provider).
SECRETS_PROVIDER_SCHEMES = ("azurekeyvault://", "awskms://", "gcpkms://", "hashivault://")
PULUMI_CLI_MISSING = ("the Pulumi CLI is not on PATH, and aksgpu drives it through Pulumi's Automation API. Fix: "
                      "install it (curl -fsSL https://get.pulumi.com | sh, or see "
                      "https://www.pulumi.com/docs/iac/download-install/) and open a new shell.")
_TRUE = frozenset({"1", "t", "true"})  # Go's strconv.ParseBool, which azure-native uses, minus odd cases


# --- where a stack lives -----------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """One environment's stack: its project, state backend and secrets provider, and why."""

    stack: str
    project_dir: Path
    stack_path: Path
    backend_url: str
    backend_kind: str
    """file, azblob or cloud (Pulumi Cloud or a self-hosted Pulumi service)."""
    backend_source: str
    secrets_provider: str | None
    """None: the Pulumi service's own encryption (Pulumi Cloud only)."""
    secrets_source: str
    local_state_dir: Path | None
    """The file backend's folder (created before use); None for other backends."""

    @property
    def uses_passphrase(self) -> bool:
        return self.secrets_provider == "passphrase"

    def workspace_env(self) -> dict[str, str]:
        """Environment for every Pulumi CLI call: the backend, so no `pulumi login` state is used."""
        return {"PULUMI_BACKEND_URL": self.backend_url}


def backend_kind(url: str, source: str | None = None) -> str:
    """file, azblob or cloud for a Pulumi backend URL; a UserError for anything else (`source`:
    where the URL was set, for the message)."""

    if url.startswith("file://"):
        return "file"
    if url.startswith("azblob://"):
        return "azblob"
    if url.startswith(("https://", "http://")):
        return "cloud"
    raise UserError(problems=[Problem(
        "backend", url, "aksgpu supports file://, azblob:// and https:// (Pulumi Cloud) backends",
        "use file://<folder> (local state), azblob://<container>?storage_account=<account> (Azure Blob "
        f"Storage, see `aksgpu backend bootstrap`), or {PULUMI_CLOUD_URL} (Pulumi Cloud)", source=source)])


def local_state_dir(url: str, project_dir: Path) -> Path:
    """The folder of a file:// backend; relative paths are relative to the project, as Pulumi runs there."""
    path = Path(os.path.expanduser(url[len("file://"):] or "~"))
    return path if path.is_absolute() else project_dir / path


def recorded_secrets_provider(stack_document: Mapping[str, Any]) -> str | None:
    """The secrets provider a stack file records once its stack exists (Pulumi writes these keys)."""
    provider = stack_document.get("secretsprovider")
    if isinstance(provider, str) and provider:
        return provider
    if stack_document.get("encryptionsalt"):
        return "passphrase"
    return None


def resolve_target(
    stack: str,
    project_dir: Path,
    stack_path: Path,
    *,
    env: Mapping[str, str],
    backend_flag: str | None = None,
    secrets_provider_flag: str | None = None,
    environment_backend: str | None = None,
    environment_secrets_provider: str | None = None,
    recorded_provider: str | None = None,
) -> Target:
    """Where a stack's state lives and how its secrets are encrypted.

    Backend: --backend > PULUMI_BACKEND_URL > stacks/environments.yaml > file://<project>/.pulumi-state.
    Secrets provider: --secrets-provider > environments.yaml > the one the stack file records >
    passphrase for a file backend, the service's own for Pulumi Cloud; an azblob backend needs an
    azurekeyvault:// key, since a team cannot share one passphrase safely.
    """

    if backend_flag:
        backend_url, backend_source = backend_flag, "--backend"
    elif env.get("PULUMI_BACKEND_URL"):
        backend_url, backend_source = env["PULUMI_BACKEND_URL"], "PULUMI_BACKEND_URL"
    elif environment_backend:
        backend_url, backend_source = environment_backend, "stacks/environments.yaml"
    else:
        backend_url = f"file://{project_dir / DEFAULT_STATE_DIR}"
        backend_source = f"default: local state in {DEFAULT_STATE_DIR}/, git-ignored"
    kind = backend_kind(backend_url, f"from {backend_source}")

    if kind == "azblob" and "storage_account=" not in backend_url and not env.get("AZURE_STORAGE_ACCOUNT"):
        raise UserError(problems=[Problem(
            "backend", backend_url, "an azblob backend names the storage account that holds the container",
            "write it as azblob://<container>?storage_account=<account>, or export AZURE_STORAGE_ACCOUNT=<account>",
            source=f"from {backend_source}")])

    if secrets_provider_flag:
        provider, provider_source = secrets_provider_flag, "--secrets-provider"
    elif environment_secrets_provider:
        provider, provider_source = environment_secrets_provider, "stacks/environments.yaml"
    elif recorded_provider:
        provider, provider_source = recorded_provider, f"recorded in {stack_path.name}"
    else:
        provider, provider_source = None, ""
    if provider == "default":  # Pulumi's word for "the backend's own": the service's, or a passphrase
        provider = None
    if provider is not None and provider != "passphrase" and not provider.startswith(SECRETS_PROVIDER_SCHEMES):
        raise UserError(problems=[Problem(
            "secretsProvider", provider, "not a secrets provider Pulumi knows",
            "use passphrase, or azurekeyvault://<vault>.vault.azure.net/keys/<key>", source=f"from {provider_source}")])
    if kind == "azblob" and (provider is None or not provider.startswith("azurekeyvault://")):
        raise UserError(problems=[Problem(
            "secretsProvider", provider if provider else MISSING,
            f"the azblob backend {backend_url} needs an Azure Key Vault secrets provider: a shared team backend "
            "should not depend on one shared passphrase",
            "set secretsProvider: azurekeyvault://<vault>.vault.azure.net/keys/<key> under defaults: in "
            "stacks/environments.yaml, or pass --secrets-provider (`aksgpu backend bootstrap` creates the vault "
            "and key)", source=f"from {provider_source}" if provider else None)])
    if provider is None:
        if kind == "cloud":
            provider_source = "Pulumi Cloud's own encryption"
        else:
            provider, provider_source = "passphrase", "default for a file backend"
    if recorded_provider and provider != recorded_provider and provider_source != f"recorded in {stack_path.name}":
        raise UserError(problems=[Problem(
            "secretsProvider", provider, f'{stack_path.name} records the secrets provider "{recorded_provider}", and '
            "an existing stack keeps the provider it was created with",
            f"move it with `pulumi stack change-secrets-provider \"{provider}\" --stack {stack}` "
            f"(PULUMI_BACKEND_URL={backend_url}); or, if the stack does not exist in this backend yet, "
            f"delete the encryptionsalt/secretsprovider/encryptedkey lines from {stack_path.name} so it "
            "is created with the new provider; or drop the new setting", source=f"from {provider_source}")])

    return Target(
        stack=stack,
        project_dir=project_dir,
        stack_path=stack_path,
        backend_url=backend_url,
        backend_kind=kind,
        backend_source=backend_source,
        secrets_provider=provider,
        secrets_source=provider_source,
        local_state_dir=local_state_dir(backend_url, project_dir) if kind == "file" else None,
    )


def target_for(stack_file: StackFile, *, backend_flag: str | None, secrets_provider_flag: str | None,
               env: Mapping[str, str]) -> Target:
    """resolve_target with the settings of stacks/environments.yaml and of the stack file itself."""
    from aksgpu.environments.file import load_environments
    from aksgpu.project.stackfile import load_yaml, stack_config_dir

    config_dir = (stack_file.project_dir / stack_config_dir(stack_file.project_dir)).resolve()
    if stack_file.path.parent.resolve() != config_dir:
        raise UserError(problems=[Problem(
            "STACK argument", str(stack_file.path.relative_to(stack_file.project_dir)),
            f"not in {config_dir.relative_to(stack_file.project_dir.resolve())}/, where Pulumi reads stack files "
            "(stackConfigDir in Pulumi.yaml)",
            f"move it there, or pass the environment name ({stack_file.stack})")])
    environments = load_environments(stack_file.project_dir)
    backend = secrets_provider = None
    if environments.exists:
        if stack_file.stack in environments.names:
            environment = environments.get(stack_file.stack)
            backend, secrets_provider = environment.backend, environment.secrets_provider
        else:  # a stack file written by hand: the shared defaults still say where a team keeps state
            backend = environments.document.defaults.backend
            secrets_provider = environments.document.defaults.secrets_provider
    document = load_yaml(stack_file.path)
    return resolve_target(
        stack_file.stack, stack_file.project_dir, stack_file.path, env=env,
        backend_flag=backend_flag, secrets_provider_flag=secrets_provider_flag,
        environment_backend=backend, environment_secrets_provider=secrets_provider,
        recorded_provider=recorded_secrets_provider(document if isinstance(document, dict) else {}),
    )


# --- prerequisites ---------------------------------------------------------------------------


def azure_credential_source(env: Mapping[str, str], config: Mapping[str, Any], az_cli_found: bool) -> str | None:
    """How the azure-native provider will sign in, or None when nothing it can use is set.

    Each setting is an ARM_* variable or the matching azure-native:* key in the stack's config.
    """
    def setting(variable: str, key: str) -> str:
        value = env.get(variable) or config.get(f"azure-native:{key}")
        return "" if value is None else str(value)

    def enabled(variable: str, key: str) -> bool:
        return setting(variable, key).strip().lower() in _TRUE

    subscription = setting("ARM_SUBSCRIPTION_ID", "subscriptionId")
    service_principal = subscription and setting("ARM_CLIENT_ID", "clientId") and setting("ARM_TENANT_ID", "tenantId")
    if service_principal and setting("ARM_CLIENT_SECRET", "clientSecret"):
        return "a service principal secret (ARM_CLIENT_SECRET)"
    if service_principal and setting("ARM_CLIENT_CERTIFICATE_PATH", "clientCertificatePath"):
        return "a service principal certificate (ARM_CLIENT_CERTIFICATE_PATH)"
    if service_principal and enabled("ARM_USE_OIDC", "useOidc"):
        return "OIDC federation (ARM_USE_OIDC)"
    # A system-assigned identity has no client ID, so only the subscription is required here.
    if subscription and enabled("ARM_USE_MSI", "useMsi"):
        return "a managed identity (ARM_USE_MSI)"
    if subscription and enabled("ARM_USE_DEFAULT_AZURE_CREDENTIAL", "useDefaultAzureCredential"):
        return "DefaultAzureCredential (ARM_USE_DEFAULT_AZURE_CREDENTIAL)"
    if az_cli_found:
        return "the Azure CLI (az login)"
    return None


def pulumi_cloud_logged_in(url: str, env: Mapping[str, str], pulumi_home: Path) -> bool:
    """True when the Pulumi CLI has a token for this service: PULUMI_ACCESS_TOKEN or `pulumi login`."""
    if env.get("PULUMI_ACCESS_TOKEN"):
        return True
    try:
        credentials = json.loads((pulumi_home / "credentials.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False

    def canonical(address: str) -> str:
        return address.rstrip("/").replace("://app.pulumi.com", "://api.pulumi.com")

    tokens = credentials.get("accessTokens") if isinstance(credentials, dict) else None
    return isinstance(tokens, dict) and canonical(url) in {canonical(str(key)) for key in tokens}


@dataclass(frozen=True)
class Readiness:
    problems: list[str]
    """Each a missing prerequisite with its fix; any one stops the command (exit 2)."""
    warnings: list[str]


def check_readiness(target: Target, *, env: Mapping[str, str], config: Mapping[str, Any], needs_azure: bool,
                    which: Callable[[str], str | None] = shutil.which, pulumi_home: Path | None = None) -> Readiness:
    """What is missing before Pulumi can run for this target. `needs_azure`: the command calls Azure
    APIs (preview, up, destroy, refresh), not just the state (outputs, kubeconfig)."""
    problems: list[str] = []
    warnings: list[str] = []
    az_found = which("az") is not None
    if which("pulumi") is None:
        problems.append(PULUMI_CLI_MISSING)
    if needs_azure and azure_credential_source(env, config, az_found) is None:
        problems.append("no Azure credentials: the azure-native provider signs in with ARM_CLIENT_ID, ARM_TENANT_ID "
                        "and ARM_SUBSCRIPTION_ID plus one of ARM_CLIENT_SECRET, ARM_CLIENT_CERTIFICATE_PATH or "
                        "ARM_USE_OIDC=true (or ARM_SUBSCRIPTION_ID with ARM_USE_MSI=true), or with the Azure CLI, "
                        "and none of these is set or installed. Fix: install the Azure CLI and run `az login`, or "
                        "export a service principal's ARM_* variables.")
    if target.uses_passphrase and "PULUMI_CONFIG_PASSPHRASE" not in env and "PULUMI_CONFIG_PASSPHRASE_FILE" not in env:
        where = "the default for the local file backend" if target.backend_kind == "file" else target.secrets_source
        problems.append(f"stack {target.stack} encrypts its secrets (the kubeconfig output among them) with a "
                        f"passphrase ({where}), and neither PULUMI_CONFIG_PASSPHRASE nor "
                        "PULUMI_CONFIG_PASSPHRASE_FILE is set; Pulumi runs non-interactively here, so it cannot ask. "
                        "Fix: export PULUMI_CONFIG_PASSPHRASE='<a passphrase you keep>' (the same one every time: "
                        "without it the stack's secrets cannot be read), or use a Key Vault key with "
                        "--secrets-provider azurekeyvault://<vault>.vault.azure.net/keys/<key>.")
    if target.backend_kind == "cloud":
        home = pulumi_home or Path(env.get("PULUMI_HOME") or Path.home() / ".pulumi")
        if not pulumi_cloud_logged_in(target.backend_url, env, home):
            problems.append(f"no token for {target.backend_url}: the Pulumi CLI is not logged in to it and "
                            f"PULUMI_ACCESS_TOKEN is not set. Fix: run `pulumi login {target.backend_url}`, or "
                            "export PULUMI_ACCESS_TOKEN (a CI token from the Pulumi Cloud console).")
    if target.backend_kind == "azblob" and not az_found and not any(
            env.get(name) for name in ("AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN", "AZURE_CLIENT_ID")):
        warnings.append("the azblob backend and the Key Vault secrets provider sign in through Azure's "
                        "DefaultAzureCredential, which reads AZURE_CLIENT_ID/AZURE_TENANT_ID/AZURE_CLIENT_SECRET "
                        "(or AZURE_FEDERATED_TOKEN_FILE), a managed identity or `az login`, not the ARM_* "
                        "variables; none but a managed identity is available here.")
    return Readiness(problems, warnings)


def readiness_message(command: str, stack: str, problems: list[str], *, suggest_plan: bool) -> str:
    if len(problems) == 1:
        text = problems[0]
    else:
        text = "\n".join([f"`aksgpu {command} {stack}` cannot run: {len(problems)} things are missing:",
                          *(f"  - {problem}" for problem in problems)])
    if suggest_plan:
        text += (f"\nTo see every resource `aksgpu up {stack}` would create, offline (no Pulumi CLI, no Azure "
                 f"account): aksgpu plan {stack}")
    return text
