"""The real workflow: preview, up, destroy, refresh, outputs and kubeconfig through Pulumi's
Automation API, and `backend bootstrap` for a team state backend on Azure.

Only typer and the standard library are imported here at module level: `aksgpu --help` must stay
fast, so pulumi.automation, yaml, rich and the spec are imported inside the commands that use them.

Exit codes: 0 done; 1 the operation failed (engine error, spec errors, declined); 2 bad input or a
missing prerequisite (Pulumi CLI, Azure credentials, passphrase); 3 `preview --expect-no-changes`
found changes; 130 interrupted.
"""

from __future__ import annotations

import enum
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from aksgpu.cli.arguments import CONTEXT_SETTINGS, StackArg
from aksgpu.cli.exit_codes import (
    EXIT_CHANGES,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
)

if TYPE_CHECKING:
    from pulumi.automation import Stack

    from aksgpu.cli.project.stackfile import StackFile
    from aksgpu.components.kubeconfig import Kubeconfig

DEFAULT_STATE_DIR = ".pulumi-state"
PULUMI_CLOUD_URL = "https://api.pulumi.com"
# Pulumi secrets providers by scheme (pulumi stack init --secrets-provider).
SECRETS_PROVIDER_SCHEMES = ("azurekeyvault://", "awskms://", "gcpkms://", "hashivault://")
PULUMI_CLI_MISSING = ("the Pulumi CLI is not on PATH, and aksgpu drives it through Pulumi's Automation API. Fix: "
                      "install it (curl -fsSL https://get.pulumi.com | sh, or see "
                      "https://www.pulumi.com/docs/iac/download-install/) and open a new shell.")
# Preview operations that change nothing in Azure.
NO_CHANGE_OPS = frozenset({"same", "read"})
_TRUE = frozenset({"1", "t", "true"})  # Go's strconv.ParseBool, which azure-native uses, minus odd cases


class LoginMode(str, enum.Enum):
    """How kubelogin gets an Entra ID token (kubelogin get-token --login)."""

    azurecli = "azurecli"
    devicecode = "devicecode"
    spn = "spn"
    msi = "msi"
    workloadidentity = "workloadidentity"


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


def backend_kind(url: str) -> str:
    """file, azblob or cloud for a Pulumi backend URL; a UserError for anything else."""
    from aksgpu.cli.project.stackfile import UserError

    if url.startswith("file://"):
        return "file"
    if url.startswith("azblob://"):
        return "azblob"
    if url.startswith(("https://", "http://")):
        return "cloud"
    raise UserError(f'backend "{url}" is not a backend aksgpu supports. Fix: use file://<folder> (local state), '
                    "azblob://<container>?storage_account=<account> (Azure Blob Storage, see "
                    f"`aksgpu backend bootstrap`), or {PULUMI_CLOUD_URL} (Pulumi Cloud).")


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
    from aksgpu.cli.project.stackfile import UserError

    if backend_flag:
        backend_url, backend_source = backend_flag, "--backend"
    elif env.get("PULUMI_BACKEND_URL"):
        backend_url, backend_source = env["PULUMI_BACKEND_URL"], "PULUMI_BACKEND_URL"
    elif environment_backend:
        backend_url, backend_source = environment_backend, "stacks/environments.yaml"
    else:
        backend_url = f"file://{project_dir / DEFAULT_STATE_DIR}"
        backend_source = f"default: local state in {DEFAULT_STATE_DIR}/, git-ignored"
    kind = backend_kind(backend_url)

    if kind == "azblob" and "storage_account=" not in backend_url and not env.get("AZURE_STORAGE_ACCOUNT"):
        raise UserError(f'backend "{backend_url}" (from {backend_source}) does not say which storage account holds '
                        "the container. Fix: write it as azblob://<container>?storage_account=<account>, "
                        "or export AZURE_STORAGE_ACCOUNT=<account>.")

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
        raise UserError(f'secrets provider "{provider}" (from {provider_source}) is not one Pulumi knows. Fix: use '
                        "passphrase, or azurekeyvault://<vault>.vault.azure.net/keys/<key>.")
    if kind == "azblob" and (provider is None or not provider.startswith("azurekeyvault://")):
        found = f'"{provider}" (from {provider_source})' if provider else "none"
        raise UserError(f"the azblob backend {backend_url} needs an Azure Key Vault secrets provider, and the one "
                        f"set is {found}: a shared team backend should not depend on one shared passphrase. Fix: "
                        "set secretsProvider: azurekeyvault://<vault>.vault.azure.net/keys/<key> under defaults: in "
                        "stacks/environments.yaml, or pass --secrets-provider (`aksgpu backend bootstrap` "
                        "creates the vault and key).")
    if provider is None:
        if kind == "cloud":
            provider_source = "Pulumi Cloud's own encryption"
        else:
            provider, provider_source = "passphrase", "default for a file backend"
    if recorded_provider and provider != recorded_provider and provider_source != f"recorded in {stack_path.name}":
        raise UserError(f'{stack_path.name} records the secrets provider "{recorded_provider}", but {provider_source} '
                        f'asks for "{provider}": an existing stack keeps the provider it was created with. Fix: '
                        f"move it with `pulumi stack change-secrets-provider \"{provider}\" --stack {stack}` "
                        f"(PULUMI_BACKEND_URL={backend_url}); or, if the stack does not exist in this backend yet, "
                        f"delete the encryptionsalt/secretsprovider/encryptedkey lines from {stack_path.name} so it "
                        "is created with the new provider; or drop the new setting.")

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
    from aksgpu.cli.environments.file import load_environments
    from aksgpu.cli.project.stackfile import UserError, load_yaml, stack_config_dir

    config_dir = (stack_file.project_dir / stack_config_dir(stack_file.project_dir)).resolve()
    if stack_file.path.parent.resolve() != config_dir:
        raise UserError(f"{stack_file.path} is not in {config_dir.relative_to(stack_file.project_dir.resolve())}/, "
                        "where Pulumi reads stack files (stackConfigDir in Pulumi.yaml). Fix: move it there, "
                        f"or pass the environment name ({stack_file.stack}).")
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


# --- running Pulumi --------------------------------------------------------------------------


def open_stack(target: Target, *, create: bool) -> Stack:
    """The stack through the Automation API on this project (a local program: Pulumi.yaml and the
    stack files in stacks/). `create`: create it in the backend when it does not exist yet."""
    from pulumi import automation as auto

    from aksgpu.cli.project.stackfile import UserError

    if target.local_state_dir is not None:
        target.local_state_dir.mkdir(parents=True, exist_ok=True)
    options = auto.LocalWorkspaceOptions(env_vars=target.workspace_env(), secrets_provider=target.secrets_provider)
    open_fn = auto.create_or_select_stack if create else auto.select_stack
    try:
        return open_fn(stack_name=target.stack, work_dir=str(target.project_dir), opts=options)
    except FileNotFoundError as error:
        # The SDK runs `pulumi version` first; with no CLI that is the error it gets.
        if error.filename and Path(str(error.filename)).name != "pulumi":
            raise
        raise UserError(PULUMI_CLI_MISSING) from None
    except subprocess.CalledProcessError as error:
        raise UserError(f"`pulumi version` failed (exit code {error.returncode}): the Pulumi CLI on PATH "
                        f"({shutil.which('pulumi')}) does not work. Fix: reinstall it "
                        "(https://www.pulumi.com/docs/iac/download-install/).") from None


def summarize_changes(change_summary: Mapping[Any, int] | None) -> dict[str, int]:
    """An engine change summary as {operation: count}, zero counts dropped."""
    summary: dict[str, int] = {}
    for operation, count in (change_summary or {}).items():
        if count:
            summary[str(getattr(operation, "value", operation))] = int(count)
    return summary


def has_changes(changes: Mapping[str, int]) -> bool:
    return any(count for operation, count in changes.items() if operation not in NO_CHANGE_OPS)


def describe_changes(changes: Mapping[str, int]) -> str:
    parts = [f"{count} to {operation}" for operation, count in changes.items() if operation not in NO_CHANGE_OPS]
    unchanged = changes.get("same", 0)
    if not parts:
        return f"no changes ({unchanged} unchanged)"
    return ", ".join(parts) + (f", {unchanged} unchanged" if unchanged else "")


def first_error_line(text: str) -> str | None:
    """The engine's own error from a failed Pulumi command's output, skipping the generic summaries."""
    generic = re.compile(r"^error: (update|preview|refresh|destroy) failed$|^error: an error occurred", re.I)
    for line in text.splitlines():
        # str(CommandError) starts its stdout and stderr on the " stdout: " / " stderr: " lines.
        line = re.sub(r"^\s*(stdout|stderr):\s*", "", line).strip()
        if line.lower().startswith("error:") and not generic.match(line):
            return line[len("error:"):].strip()
    return None


def automation_error_message(error: BaseException, target: Target, operation: str) -> str | None:
    """One clear message for an Automation API error; None when `error` is not one."""
    errors = sys.modules.get("pulumi.automation.errors")
    if errors is None:
        return None
    stack = target.stack
    if isinstance(error, errors.ConcurrentUpdateError):
        return (f"stack {stack} is locked by another update (an `aksgpu up`, `pulumi up` or CI job). Fix: wait for "
                f"it to finish; if none is running (a run was killed), clear the lock with "
                f"`PULUMI_BACKEND_URL={target.backend_url} pulumi cancel --stack {stack}`.")
    if isinstance(error, errors.StackNotFoundError):
        return (f"stack {stack} does not exist in the backend {target.backend_url} ({target.backend_source}). Fix: "
                f"create it with `aksgpu up {stack}`, or point at the backend that holds it with --backend or "
                "backend: in stacks/environments.yaml.")
    if isinstance(error, errors.InvalidVersionError):
        return f"the Pulumi CLI on PATH is too old for this Pulumi SDK: {error}. Fix: upgrade the CLI."
    if isinstance(error, errors.CommandError):
        detail = first_error_line(str(error))
        what = "the Pulumi program failed" if isinstance(error, (errors.RuntimeError, errors.CompilationError)) \
            else f"`pulumi {operation}` failed"
        return (f"{what} for stack {stack}" + (f": {detail}" if detail else "")
                + ". The engine's full output is above.")
    if type(error).__name__ == "RuntimeError" and "summary event never found" in str(error):
        return (f"`pulumi {operation}` ended without a summary for stack {stack}: the engine stopped early. "
                "Its output is above.")
    return None


@contextmanager
def command_errors(operation: str, target_box: list[Target]) -> Iterator[None]:
    """Turns user errors and Automation API errors into one message and an exit code, never a traceback."""
    from aksgpu.cli.project.stackfile import UserError

    try:
        yield
    except typer.Exit:
        raise
    except UserError as error:
        fail(str(error), getattr(error, "exit_code", EXIT_USAGE))
    except KeyboardInterrupt:
        stack = target_box[0].stack if target_box else "ENV"
        fail(f"interrupted. Pulumi was told to stop; if it was changing resources, run `aksgpu refresh {stack}` to "
              f"bring the state in line with Azure (and `pulumi cancel --stack {stack}` if the stack stays locked).",
              EXIT_INTERRUPTED)
    except Exception as error:  # noqa: BLE001 - only Automation API errors are translated; others re-raise
        message = automation_error_message(error, target_box[0], operation) if target_box else None
        if message is None:
            raise
        fail(message, EXIT_FAILED)


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def say(message: str, style: str | None = None) -> None:
    """A status line on stderr, so stdout carries only engine output or data."""
    from rich.console import Console
    from rich.text import Text

    Console(stderr=True, highlight=False, soft_wrap=True).print(Text(message, style=style or ""))


def _stdin_is_interactive() -> bool:
    return sys.stdin.isatty()


class _EngineOutput:
    """Streams the engine's lines as they come: to stdout, or to stderr when stdout carries JSON."""

    def __init__(self, to_stderr: bool) -> None:
        self.to_stderr = to_stderr
        stream = sys.stderr if to_stderr else sys.stdout
        self.color = "always" if stream.isatty() else "never"

    def out(self, line: str) -> None:
        typer.echo(line, err=self.to_stderr)

    def err(self, line: str) -> None:
        typer.echo(line, err=True)

    def options(self) -> dict[str, Any]:
        return {"on_output": self.out, "on_error": self.err, "color": self.color}


def _prepare(stack: str, backend: str | None, secrets_provider: str | None,
             box: list[Target]) -> tuple[StackFile, Target]:
    from aksgpu.cli.project.stackfile import resolve_stack

    stack_file = resolve_stack(stack)
    target = target_for(stack_file, backend_flag=backend, secrets_provider_flag=secrets_provider, env=os.environ)
    box.append(target)
    return stack_file, target


def _require_ready(command: str, stack_file: StackFile, target: Target, *, needs_azure: bool) -> None:
    from aksgpu.cli.project.stackfile import UserError

    readiness = check_readiness(target, env=os.environ, config=stack_file.config, needs_azure=needs_azure)
    for warning in readiness.warnings:
        say(f"warning: {warning}", "yellow")
    if readiness.problems:
        raise UserError(readiness_message(command, target.stack, readiness.problems, suggest_plan=needs_azure))


def _require_confirmable(command: str, stack: str) -> None:
    from aksgpu.cli.project.stackfile import UserError

    if not _stdin_is_interactive():
        raise UserError(f"`aksgpu {command} {stack}` asks for confirmation, but stdin is not a terminal (a script or "
                        f"CI job), so it cannot ask. Fix: pass --yes to go ahead without asking "
                        f"(review `aksgpu preview {stack}` first).")


def _policy_packs(folders: list[Path] | None) -> list[str] | None:
    """Policy pack folders as the engine takes them; each must hold a PulumiPolicy.yaml."""
    from aksgpu.cli.project.stackfile import UserError

    for folder in folders or []:
        if not (folder / "PulumiPolicy.yaml").is_file():
            raise UserError(f"--policy-pack {folder}: no PulumiPolicy.yaml there, so it is not a policy pack. Fix: "
                            "point at the folder of a Pulumi policy pack.")
    return [str(folder.resolve()) for folder in folders] if folders else None


def _require_rendered(command: str, stack_file: StackFile) -> None:
    """`up` deploys only a stack file that matches stacks/environments.yaml; `preview` warns."""
    from aksgpu.cli.environments.render import EnvironmentNotRendered, render_state
    from aksgpu.cli.project.stackfile import UserError

    name = stack_file.stack
    try:
        rendered = render_state(stack_file)
    except EnvironmentNotRendered as error:
        if command == "up":
            raise
        say(f"warning: {error}", "yellow")
        return
    if rendered is None or rendered.state == "current":
        return
    if rendered.state == "stale" and command == "up":
        raise UserError(f"{stack_file.path.name} is out of date with stacks/environments.yaml, so `aksgpu up {name}` "
                        f"would deploy something else than the environment says. Fix: run `aksgpu render {name}`, "
                        "review and commit the change, then run up again.")
    why = rendered.reason or "it is out of date with stacks/environments.yaml"
    say(f"warning: {stack_file.path.name} is not what `aksgpu render {name}` would write: {why}. "
         "Pulumi uses the stack file as it is.", "yellow")


def _validate_spec(stack_file: StackFile) -> None:
    """The spec's errors before Pulumi starts: the same message as `aksgpu validate`, exit 1."""
    from aksgpu.components.spec import SpecError, parse_cluster_spec

    try:
        parse_cluster_spec(stack_file.cluster, source=f"aksgpu:cluster in {stack_file.path.name}")
    except SpecError as error:
        typer.echo(str(error), err=True)
        raise typer.Exit(EXIT_FAILED) from None


def _header(command: str, target: Target) -> None:
    say(f"aksgpu {command} {target.stack}", "bold")
    say(f"  backend  {target.backend_url}  ({target.backend_source})", "dim")
    provider = target.secrets_provider or "service"
    say(f"  secrets  {provider}  ({target.secrets_source})", "dim")


def is_protected(stack_file: StackFile) -> bool:
    cluster = stack_file.cluster
    return isinstance(cluster, dict) and cluster.get("protect") is True


def protected_in_state(deployment: Mapping[str, Any] | None) -> list[str]:
    """URNs of the resources a stack's state marks protected (`pulumi stack export`)."""
    resources = (deployment or {}).get("resources") or []
    return [str(resource.get("urn")) for resource in resources
            if isinstance(resource, dict) and resource.get("protect")]


# --- outputs and kubeconfig ------------------------------------------------------------------

SECRET_MASK = "[secret]"


def outputs_document(outputs: Mapping[str, tuple[Any, bool]], *, show_secrets: bool) -> dict[str, Any]:
    """Stack outputs {name: value}; secret values masked unless `show_secrets`."""
    return {name: (value if show_secrets or not secret else SECRET_MASK)
            for name, (value, secret) in sorted(outputs.items())}


def outputs_text(outputs: Mapping[str, tuple[Any, bool]], *, show_secrets: bool) -> str:
    document = outputs_document(outputs, show_secrets=show_secrets)
    if not document:
        return ""
    width = max(len(name) for name in document)
    lines: list[str] = []
    for name, value in document.items():
        text = value if isinstance(value, str) else json.dumps(value)
        if "\n" in text.strip():
            lines.append(name)
            lines += [f"    {line}" for line in text.rstrip("\n").splitlines()]
        else:
            suffix = "  (--show-secrets to print)" if value == SECRET_MASK and outputs[name][1] else ""
            lines.append(f"{name.ljust(width)}  {text}{suffix}")
    return "\n".join(lines)


def kubeconfig_for_login(kubeconfig: str, login: LoginMode | str) -> Kubeconfig:
    """components.kubeconfig.kubeconfig_for_login, with its errors as UserError (exit code 2)."""
    from aksgpu.cli.project.stackfile import UserError
    from aksgpu.components.kubeconfig import KubeconfigError
    from aksgpu.components.kubeconfig import kubeconfig_for_login as convert

    try:
        return convert(kubeconfig, LoginMode(login).value)
    except KubeconfigError as error:
        raise UserError(str(error)) from None


def write_kubeconfig(path: Path, text: str, *, force: bool) -> str:
    """Writes the kubeconfig with mode 0600; 'written', 'replaced' or 'unchanged'. An existing
    different file is replaced only with `force`: it may hold other clusters' credentials."""
    from aksgpu.cli.project.files import read_text_if_exists, write_text_atomically
    from aksgpu.cli.project.stackfile import UserError

    current = read_text_if_exists(path)
    existed = current is not None
    if existed:
        if current == text:
            path.chmod(0o600)
            return "unchanged"
        if not force:
            raise UserError(f"{path} already exists and differs from this cluster's kubeconfig. Fix: pass --force "
                            "to replace it, or --output PATH to write elsewhere.")
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as error:
        raise UserError(f"cannot create {path.parent}: {error.strerror}. Fix: choose another --output.") from None
    write_text_atomically(path, text, mode=0o600)
    return "replaced" if existed else "written"


# --- backend bootstrap -----------------------------------------------------------------------

STORAGE_ACCOUNT_NAME = re.compile(r"^[a-z0-9]{3,24}$")
KEY_VAULT_NAME = re.compile(r"^[a-zA-Z](?!.*--)[a-zA-Z0-9-]{1,22}[a-zA-Z0-9]$")
CONTAINER_NAME = re.compile(r"^[a-z0-9](?!.*--)[a-z0-9-]{1,61}[a-z0-9]$")
KEY_NAME = re.compile(r"^[a-zA-Z0-9-]{1,127}$")
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


def bootstrap_problems(settings: BootstrapSettings) -> list[str]:
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
        ("--key-vault", settings.key_vault, KEY_VAULT_NAME,
         "must be 3-24 letters, digits and single hyphens, starting with a letter and ending with a letter or "
         "digit, unique across Azure", "kv-pulumi-7f3a"),
        ("--key", settings.key, KEY_NAME, "must be 1-127 letters, digits and hyphens", "pulumi-secrets"),
    ]
    problems = [f'{option} "{value}" {rule}. Fix: e.g. {option} {example}.'
                for option, value, pattern, rule, example in checks if not pattern.fullmatch(value)]
    if settings.sku not in STORAGE_SKUS:
        problems.append(f'--sku "{settings.sku}" must be one of {", ".join(STORAGE_SKUS)}. '
                        "Fix: e.g. --sku Standard_ZRS.")
    if not 1 <= settings.retention_days <= 365:
        problems.append(f"--retention-days {settings.retention_days} must be 1-365 (Azure's soft-delete range). "
                        "Fix: e.g. --retention-days 30.")
    if settings.assignee is not None and not _ASSIGNEE.fullmatch(settings.assignee):
        problems.append(f'--assignee "{settings.assignee}" must be an object ID, UPN or app ID (letters, digits and '
                        "@ . _ - + #). Fix: e.g. --assignee ci-bot@contoso.com.")
    return problems


@dataclass(frozen=True)
class AzStep:
    description: str
    argv: list[str]
    capture: str | None = None
    """A shell variable this step's stdout sets; later steps use it as ${NAME}."""
    unless: list[str] | None = None
    """A probe: when it succeeds, the step is skipped (what exists already stays as it is)."""
    retries: int = 0
    """Extra attempts a minute apart: new role assignments take a few minutes to apply."""


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


def _shell_word(token: str) -> str:
    # Our ${NAME} placeholders must expand, so those words go in double quotes (the rest of such a
    # word is a validated Azure name or a fixed path, with nothing else a shell would expand).
    return f'"{token}"' if "${" in token else shlex.quote(token)


def shell_command(argv: list[str]) -> str:
    return " ".join(_shell_word(token) for token in argv)


def shell_command_lines(argv: list[str], indent: str = "") -> list[str]:
    """A command as script lines: the command words first, then one `--option value` per line."""
    first = next((index for index, token in enumerate(argv) if token.startswith("--")), len(argv))
    groups: list[list[str]] = [argv[:first]]
    for token in argv[first:]:
        if token.startswith("--"):
            groups.append([token])
        else:
            groups[-1].append(token)
    words = [shell_command(group) for group in groups]
    if len(" ".join(words)) <= 100:
        return [indent + " ".join(words)]
    return ([indent + words[0] + " \\"] + [f"{indent}    {word} \\" for word in words[1:-1]]
            + [f"{indent}    {words[-1]}"])


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
        if step.capture:
            lines.append(f'{step.capture}="$({shell_command(step.argv)})"')
        elif step.unless:
            lines.append(f"if ! {shell_command(step.unless)} 2>/dev/null; then")
            lines += shell_command_lines(step.argv, indent="  ")
            lines.append("fi")
        else:
            lines += shell_command_lines(step.argv)
        lines.append("")
    lines.append("# Then put these lines in stacks/environments.yaml "
                 "(every environment uses them unless it sets its own):")
    lines.append("#")
    lines += [f"#   {line}" for line in environments_snippet(settings).splitlines()]
    return "\n".join(lines) + "\n"


def substitute(argv: list[str], values: Mapping[str, str]) -> list[str]:
    def one(token: str) -> str:
        for name, value in values.items():
            token = token.replace(f"${{{name}}}", value)
        return token
    return [one(token) for token in argv]


def run_bootstrap(settings: BootstrapSettings, *, run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run,
                  sleep: Callable[[float], None] = time.sleep) -> None:
    """Runs the steps one by one; a failed step is a UserError naming the command and Azure's message."""
    from aksgpu.cli.project.stackfile import UserError

    values: dict[str, str] = {}
    steps = bootstrap_steps(settings)
    for number, step in enumerate(steps, start=1):
        say(f"[{number}/{len(steps)}] {step.description}")
        if step.unless and run(substitute(step.unless, values), capture_output=True, text=True).returncode == 0:
            say("    exists already: left as it is", "dim")
            continue
        argv = substitute(step.argv, values)
        for attempt in range(step.retries + 1):
            result = run(argv, capture_output=True, text=True)
            if result.returncode == 0 or attempt == step.retries:
                break
            say("    not allowed yet (role assignments take a few minutes to apply); trying again in 60 s", "dim")
            sleep(60)
        if result.returncode != 0:
            message = (result.stderr or result.stdout or "").strip().splitlines()
            raise UserError(f"step {number} failed: {shell_command(argv)}\n  {message[-1] if message else ''}\n"
                            "Fix: correct the cause and run the same `aksgpu backend bootstrap ... --apply` again: "
                            "steps that are done already are safe to repeat.")
        if step.capture:
            values[step.capture] = result.stdout.strip()


# --- the commands ----------------------------------------------------------------------------

BackendOption = Annotated[str | None, typer.Option(
    "--backend", metavar="URL",
    help="Pulumi state backend: file://<folder>, azblob://<container>?storage_account=<account>, or "
         f"{PULUMI_CLOUD_URL}. Default: PULUMI_BACKEND_URL, then backend: in stacks/environments.yaml, "
         f"then local state in {DEFAULT_STATE_DIR}/.")]
SecretsOption = Annotated[str | None, typer.Option(
    "--secrets-provider", metavar="PROVIDER",
    help="passphrase, or azurekeyvault://<vault>.vault.azure.net/keys/<key> (required for azblob). Default: "
         "secretsProvider: in stacks/environments.yaml, then passphrase (file backend) or the service's own "
         "(Pulumi Cloud).")]
YesOption = Annotated[bool, typer.Option("--yes", "-y", help="Go ahead without asking (needed without a terminal).")]
JsonOption = Annotated[bool, typer.Option(
    "--json", help="Print the result as JSON on stdout; engine output goes to stderr.")]


PolicyPackOption = Annotated[list[Path] | None, typer.Option(
    "--policy-pack", metavar="FOLDER", help="A Pulumi policy pack folder to apply (repeatable); a mandatory violation fails the run.")]


def preview(
    stack: StackArg,
    diff: Annotated[bool, typer.Option("--diff", help="Show each property change.")] = False,
    refresh: Annotated[bool, typer.Option("--refresh", help="Refresh the state from Azure first.")] = False,
    expect_no_changes: Annotated[bool, typer.Option(
        "--expect-no-changes", help="Exit 3 when there are changes (drift checks in CI).")] = False,
    policy_pack: PolicyPackOption = None,
    as_json: JsonOption = False,
    backend: BackendOption = None,
    secrets_provider: SecretsOption = None,
) -> None:
    """Show what `aksgpu up` would change in Azure (pulumi preview through the Automation API).

    Needs the Pulumi CLI and Azure credentials; `aksgpu plan` is the offline view. Exit codes: 0 done,
    1 the preview or the spec failed, 2 bad input or a missing prerequisite, 3 changes found with
    --expect-no-changes.
    """
    box: list[Target] = []
    with command_errors("preview", box):
        stack_file, target = _prepare(stack, backend, secrets_provider, box)
        _validate_spec(stack_file)
        _require_rendered("preview", stack_file)
        _require_ready("preview", stack_file, target, needs_azure=True)
        _header("preview", target)
        engine = _EngineOutput(to_stderr=as_json)
        result = open_stack(target, create=True).preview(diff=diff, refresh=refresh,
                                                         policy_packs=_policy_packs(policy_pack), **engine.options())
        changes = summarize_changes(result.change_summary)
        changed = has_changes(changes)
        if as_json:
            typer.echo(json.dumps({"stack": target.stack, "backend": target.backend_url, "operation": "preview",
                                   "hasChanges": changed, "changes": changes}, indent=2))
        else:
            say(f"Preview of {target.stack}: {describe_changes(changes)}.", "bold")
        if expect_no_changes and changed:
            say(f"--expect-no-changes: stack {target.stack} has changes (exit 3).", "yellow")
            raise typer.Exit(EXIT_CHANGES)


def up(
    stack: StackArg,
    yes: YesOption = False,
    diff: Annotated[bool, typer.Option("--diff", help="Show each property change.")] = False,
    refresh: Annotated[bool, typer.Option("--refresh", help="Refresh the state from Azure first.")] = False,
    policy_pack: PolicyPackOption = None,
    as_json: JsonOption = False,
    backend: BackendOption = None,
    secrets_provider: SecretsOption = None,
) -> None:
    """Create or update the stack's resources in Azure (pulumi up through the Automation API).

    Shows the preview and asks before changing anything, unless --yes. Exit codes: 0 done, 1 the
    update or the spec failed or you declined, 2 bad input or a missing prerequisite.
    """
    box: list[Target] = []
    with command_errors("up", box):
        stack_file, target = _prepare(stack, backend, secrets_provider, box)
        _validate_spec(stack_file)
        _require_rendered("up", stack_file)
        if not yes:
            _require_confirmable("up", target.stack)
        _require_ready("up", stack_file, target, needs_azure=True)
        _header("up", target)
        engine = _EngineOutput(to_stderr=as_json)
        packs = _policy_packs(policy_pack)
        pulumi_stack = open_stack(target, create=True)
        if not yes:
            preview_result = pulumi_stack.preview(diff=diff, refresh=refresh, policy_packs=packs, **engine.options())
            say(f"Preview of {target.stack}: {describe_changes(summarize_changes(preview_result.change_summary))}.",
                 "bold")
            if not typer.confirm(f"Apply these changes to stack {target.stack}?", default=False, err=True):
                say("Cancelled: nothing was changed.")
                raise typer.Exit(EXIT_FAILED)
        result = pulumi_stack.up(diff=diff, refresh=refresh, policy_packs=packs, **engine.options())
        _report_update("up", target, result.summary, as_json,
                       outputs={name: (value.value, value.secret) for name, value in result.outputs.items()})


def destroy(
    stack: StackArg,
    yes: YesOption = False,
    as_json: JsonOption = False,
    backend: BackendOption = None,
    secrets_provider: SecretsOption = None,
) -> None:
    """Delete every resource of the stack (pulumi destroy through the Automation API).

    Refuses a protected stack (protect: true), and asks first unless --yes. The stack, its history
    and its stack file stay. Exit codes: 0 done, 1 the destroy failed or you declined, 2 bad input,
    a protected stack or a missing prerequisite.
    """
    from aksgpu.cli.project.stackfile import UserError

    box: list[Target] = []
    with command_errors("destroy", box):
        stack_file, target = _prepare(stack, backend, secrets_provider, box)
        name = target.stack
        if is_protected(stack_file):
            raise UserError(
                f"stack {name} is protected: {target.stack_path.relative_to(target.project_dir)} sets "
                "aksgpu:cluster protect: true, so Pulumi refuses to delete the cluster, registry, workspaces and "
                "resource group; a destroy would delete everything else first and then fail halfway. Fix, if you "
                f"mean to destroy it: set protect: false in the {name} environment (its overrides in "
                f"stacks/environments.yaml), run `aksgpu render {name}`, apply that with `aksgpu up {name}` (it only "
                f"lifts the protection in Pulumi's state), then run `aksgpu destroy {name}`.")
        if not yes:
            _require_confirmable("destroy", name)
        _require_ready("destroy", stack_file, target, needs_azure=True)
        _header("destroy", target)
        engine = _EngineOutput(to_stderr=as_json)
        pulumi_stack = open_stack(target, create=False)
        # The spec may say protect: false before `aksgpu up` has applied it; the state decides.
        still_protected = protected_in_state(pulumi_stack.export_stack().deployment)
        if still_protected:
            raise UserError(f"stack {name}'s state still protects {len(still_protected)} resources (e.g. "
                            f"{still_protected[0]}): protect: false is in the spec but not applied yet. Fix: run "
                            f"`aksgpu up {name}` first, then `aksgpu destroy {name}`.")
        if not yes:
            preview_result = pulumi_stack.preview_destroy(**engine.options())
            say(f"Destroy preview of {name}: {describe_changes(summarize_changes(preview_result.change_summary))}.",
                 "bold")
            if not typer.confirm(f"Delete every resource of stack {name}? This cannot be undone.", default=False,
                                 err=True):
                say("Cancelled: nothing was deleted.")
                raise typer.Exit(EXIT_FAILED)
        result = pulumi_stack.destroy(**engine.options())
        _report_update("destroy", target, result.summary, as_json)


def refresh(
    stack: StackArg,
    as_json: JsonOption = False,
    backend: BackendOption = None,
    secrets_provider: SecretsOption = None,
) -> None:
    """Bring the stack's state in line with what exists in Azure (pulumi refresh).

    Changes only Pulumi's state, never Azure, so it does not ask. Exit codes: 0 done, 1 the refresh
    failed, 2 bad input or a missing prerequisite.
    """
    box: list[Target] = []
    with command_errors("refresh", box):
        stack_file, target = _prepare(stack, backend, secrets_provider, box)
        _require_ready("refresh", stack_file, target, needs_azure=True)
        _header("refresh", target)
        engine = _EngineOutput(to_stderr=as_json)
        result = open_stack(target, create=False).refresh(**engine.options())
        _report_update("refresh", target, result.summary, as_json)


def _report_update(operation: str, target: Target, summary: Any, as_json: bool,
                   outputs: Mapping[str, tuple[Any, bool]] | None = None) -> None:
    changes = summarize_changes(getattr(summary, "resource_changes", None))
    outcome = str(getattr(summary, "result", "succeeded"))
    if as_json:
        document: dict[str, Any] = {"stack": target.stack, "backend": target.backend_url, "operation": operation,
                                    "result": outcome, "changes": changes}
        if outputs is not None:
            document["outputs"] = outputs_document(outputs, show_secrets=False)
        typer.echo(json.dumps(document, indent=2, default=str))
    else:
        counts = ", ".join(f"{count} {op}" for op, count in changes.items()) or "no resources"
        say(f"{operation} of {target.stack}: {outcome} ({counts}).", "bold" if outcome == "succeeded" else "red")
    if outcome != "succeeded":
        raise typer.Exit(EXIT_FAILED)


def outputs(
    stack: StackArg,
    as_json: Annotated[bool, typer.Option("--json", help="Print the outputs as a JSON object.")] = False,
    show_secrets: Annotated[bool, typer.Option("--show-secrets", help="Print secret values (the kubeconfig).")] = False,
    backend: BackendOption = None,
    secrets_provider: SecretsOption = None,
) -> None:
    """Print the stack's outputs (cluster name and ID, OIDC issuer, registry, workspace, kubeconfig).

    Secrets are masked unless --show-secrets. Reads the state only: needs the Pulumi CLI, not Azure
    credentials. Exit codes: 0 done, 1 reading the state failed, 2 bad input or a missing prerequisite.
    """
    box: list[Target] = []
    with command_errors("stack output", box):
        stack_file, target = _prepare(stack, backend, secrets_provider, box)
        _require_ready("outputs", stack_file, target, needs_azure=False)
        stack_outputs = open_stack(target, create=False).outputs()
        values = {name: (value.value, value.secret) for name, value in stack_outputs.items()}
        if as_json:
            typer.echo(json.dumps(outputs_document(values, show_secrets=show_secrets), indent=2, default=str))
        elif values:
            typer.echo(outputs_text(values, show_secrets=show_secrets))
        else:
            say(f"stack {target.stack} has no outputs yet: run `aksgpu up {target.stack}`.")


def kubeconfig(
    stack: StackArg,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="Where to write it; '-' prints it. Default: ~/.kube/aksgpu-<env>.yaml.")] = None,
    login: Annotated[LoginMode, typer.Option(
        "--login", help="How kubelogin signs in: azurecli (after az login), devicecode, spn, msi or "
                        "workloadidentity (the last three read AZURE_* variables).")] = LoginMode.azurecli,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing, different file.")] = False,
    backend: BackendOption = None,
    secrets_provider: SecretsOption = None,
) -> None:
    """Write a kubeconfig for the cluster from the stack's kubeconfig output (Entra ID sign-in through kubelogin).

    Prints `export KUBECONFIG=...` on stdout, so `eval "$(aksgpu kubeconfig dev)"` uses it. Exit codes:
    0 done, 1 reading the state failed, 2 bad input, an existing different file, or a missing prerequisite.
    """
    from aksgpu.cli.project.stackfile import UserError

    box: list[Target] = []
    with command_errors("stack output", box):
        stack_file, target = _prepare(stack, backend, secrets_provider, box)
        _require_ready("kubeconfig", stack_file, target, needs_azure=False)
        value = open_stack(target, create=False).outputs().get("kubeconfig")
        if value is None or not value.value:
            raise UserError(f"stack {target.stack} has no kubeconfig output: the cluster has not been deployed. "
                            f"Fix: run `aksgpu up {target.stack}` first.")
        result = kubeconfig_for_login(str(value.value), login)
        if result.other_users:
            say(f"note: {', '.join(result.other_users)} sign in with AKS local-account credentials, not Entra ID; "
                 "written as AKS gave them.", "dim")
        if output is not None and str(output) == "-":
            typer.echo(result.text, nl=False)
            return
        path = (output or Path.home() / ".kube" / f"aksgpu-{target.stack}.yaml").expanduser()
        state = write_kubeconfig(path, result.text, force=force)
        say(f"{state} {path} (mode 0600, login {LoginMode(login).value}"
             + (f", context {result.current_context})" if result.current_context else ")"))
        if result.converted_users and shutil.which("kubelogin") is None:
            say("warning: kubelogin is not on PATH; kubectl needs it to sign in. Install it with "
                 "`az aks install-cli`, or see https://azure.github.io/kubelogin/install.html.", "yellow")
        typer.echo(f"export KUBECONFIG={shlex.quote(str(path))}")


def bootstrap(
    resource_group: Annotated[str, typer.Option("--resource-group", "-g", help="Resource group to create or reuse.")],
    location: Annotated[str, typer.Option("--location", "-l", help="Azure region, e.g. eastus2.")],
    storage_account: Annotated[str, typer.Option(
        "--storage-account", help="Storage account for state (3-24 a-z, 0-9).")],
    container: Annotated[str, typer.Option("--container", help="Blob container for state, e.g. pulumi-state.")],
    key_vault: Annotated[str, typer.Option("--key-vault", help="Key vault for the secrets key (3-24 characters).")],
    key: Annotated[str, typer.Option(
        "--key", help="Name of the RSA key that encrypts stack secrets.")] = "pulumi-secrets",
    assignee: Annotated[str | None, typer.Option(
        "--assignee", help="Who gets data access (object ID, UPN or app ID, e.g. a CI identity). Default: you.")
    ] = None,
    sku: Annotated[str, typer.Option(
        "--sku", help="Storage redundancy: " + ", ".join(STORAGE_SKUS) + ".")] = "Standard_LRS",
    retention_days: Annotated[int, typer.Option(
        "--retention-days", help="Soft-delete retention for blobs and the container.")] = 30,
    apply: Annotated[bool, typer.Option(
        "--apply", help="Run the commands with the Azure CLI instead of printing them.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the steps and settings as JSON.")] = False,
) -> None:
    """Print (or --apply) the az commands that create a team state backend: a storage account and a
    Key Vault key, with the role assignments, and the lines for stacks/environments.yaml.

    Exit codes: 0 done, 1 an az command failed, 2 a name breaks Azure's rules or az is missing.
    """
    from aksgpu.cli.project.stackfile import UserError

    settings = BootstrapSettings(resource_group, location, storage_account, container, key_vault, key, assignee, sku,
                                 retention_days)
    with command_errors("bootstrap", []):
        problems = bootstrap_problems(settings)
        if problems:
            raise UserError(problems[0] if len(problems) == 1 else "\n".join(
                [f"{len(problems)} names break Azure's rules:", *(f"  - {problem}" for problem in problems)]))
        if not apply:
            if as_json:
                typer.echo(json.dumps({
                    "steps": [{"description": step.description, "command": step.argv, "capture": step.capture,
                               "unless": step.unless} for step in bootstrap_steps(settings)],
                    "environments": {"defaults": {"backend": settings.backend_url,
                                                  "secretsProvider": settings.secrets_provider}},
                }, indent=2))
            else:
                typer.echo(bootstrap_script(settings), nl=False)
            return
        if shutil.which("az") is None:
            raise UserError("--apply runs the Azure CLI, and az is not on PATH. Fix: install it "
                            "(https://learn.microsoft.com/cli/azure/install-azure-cli) and run `az login`, or drop "
                            "--apply to print the commands and run them elsewhere (Azure Cloud Shell has az).")
        try:
            run_bootstrap(settings)
        except UserError as error:
            fail(str(error), EXIT_FAILED)
        say("Backend ready. Put these lines in stacks/environments.yaml:", "bold")
        typer.echo(environments_snippet(settings), nl=False)


def register(app: typer.Typer) -> None:
    """Adds the workflow commands and the `backend` group to the aksgpu app."""
    for command in (preview, up, destroy, refresh, outputs, kubeconfig):
        app.command()(command)
    backend_app = typer.Typer(name="backend", help="Pulumi state backends: set up a team backend on Azure.",
                              no_args_is_help=True, context_settings=CONTEXT_SETTINGS)
    backend_app.command()(bootstrap)
    app.add_typer(backend_app, name="backend")
