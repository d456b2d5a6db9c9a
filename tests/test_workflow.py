"""The real workflow commands (cli/workflow/), tested up to the Pulumi CLI boundary.

There is no Pulumi CLI and no Azure account here, so nothing below runs the engine: the pure
parts (backend and secrets resolution, prerequisites, kubeconfig, bootstrap) are tested directly,
and the commands through Typer's runner up to the point where they would start Pulumi. A fake
`pulumi` on PATH is only ever used to get past the `which("pulumi")` check.
"""

from __future__ import annotations

import base64
import json
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from aksgpu.errors import UserError
from aksgpu.project.stackfile import resolve_stack
from aksgpu.workflow.backend import (
    BootstrapSettings,
    bootstrap_problems,
    bootstrap_script,
    bootstrap_steps,
    run_bootstrap,
)
from aksgpu.cli.workflow.commands import register
from aksgpu.workflow.kubeconfig import kubeconfig_for_login, write_kubeconfig
from aksgpu.cli.workflow.runner import (
    automation_error_message,
    describe_changes,
    first_error_line,
    has_changes,
    open_stack,
    outputs_document,
    outputs_text,
    protected_in_state,
    summarize_changes,
)
from aksgpu.workflow.target import Target, azure_credential_source, check_readiness, resolve_target, target_for
from aksgpu.components.kubeconfig import AKS_AAD_SERVER_ID
from tests.helpers import EXAMPLE, base_spec, typer_app_with

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("no_cloud_environment")
PROJECT = Path("/work/project")
STACK_PATH = PROJECT / "stacks" / "Pulumi.dev.yaml"
SERVICE_PRINCIPAL = {"ARM_CLIENT_ID": "c", "ARM_TENANT_ID": "t", "ARM_SUBSCRIPTION_ID": "s", "ARM_CLIENT_SECRET": "x"}


@pytest.fixture
def app() -> typer.Typer:
    return typer_app_with(register, "A test app holding only the workflow commands.")


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A small project: Pulumi.yaml, the dev stack, and a protected stack; the current folder."""
    project_dir = tmp_path / "project"
    (project_dir / "stacks").mkdir(parents=True)
    shutil.copy(EXAMPLE / "Pulumi.yaml", project_dir / "Pulumi.yaml")
    shutil.copy(EXAMPLE / "stacks" / "Pulumi.dev.yaml", project_dir / "stacks" / "Pulumi.dev.yaml")
    protected = {**base_spec(), "protect": True}
    (project_dir / "stacks" / "Pulumi.vault.yaml").write_text(yaml.safe_dump({"config": {"aksgpu:cluster": protected}}))
    monkeypatch.chdir(project_dir)
    return project_dir


def _path_with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, fake_pulumi: bool) -> None:
    """PATH holds one empty folder, or one with a `pulumi` that only satisfies which() and fails if run."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if fake_pulumi:
        script = bin_dir / "pulumi"
        script.write_text("#!/bin/sh\necho 'not a real Pulumi CLI' >&2\nexit 1\n")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(bin_dir))


# --- backend and secrets provider ------------------------------------------------------------


def _resolve(**kwargs: Any) -> Target:
    return resolve_target("dev", PROJECT, STACK_PATH, **{"env": {}, **kwargs})


def test_default_is_local_state_in_the_project_with_a_passphrase() -> None:
    target = _resolve()
    assert target.backend_url == f"file://{PROJECT}/.pulumi-state" and target.backend_kind == "file"
    assert target.local_state_dir == PROJECT / ".pulumi-state"
    assert target.secrets_provider == "passphrase" and target.uses_passphrase
    assert target.workspace_env() == {"PULUMI_BACKEND_URL": f"file://{PROJECT}/.pulumi-state"}


def test_backend_order_flag_then_environment_variable_then_environments_yaml() -> None:
    env = {"PULUMI_BACKEND_URL": "file:///srv/env-var-state"}
    from_yaml = "file:///srv/yaml-state"
    assert _resolve(environment_backend=from_yaml).backend_url == from_yaml
    assert _resolve(env=env, environment_backend=from_yaml).backend_source == "PULUMI_BACKEND_URL"
    flagged = _resolve(env=env, environment_backend=from_yaml, backend_flag="file:///srv/flag-state")
    assert (flagged.backend_url, flagged.backend_source) == ("file:///srv/flag-state", "--backend")


def test_secrets_provider_order_flag_then_environments_yaml_then_recorded() -> None:
    vault = "azurekeyvault://kv-a.vault.azure.net/keys/pulumi"
    assert _resolve(recorded_provider="passphrase").secrets_source == "recorded in Pulumi.dev.yaml"
    assert _resolve(environment_secrets_provider=vault).secrets_provider == vault
    flagged = _resolve(environment_secrets_provider=vault, secrets_provider_flag="passphrase")
    assert (flagged.secrets_provider, flagged.secrets_source) == ("passphrase", "--secrets-provider")


def test_relative_file_backend_is_inside_the_project() -> None:
    assert _resolve(backend_flag="file://state/here").local_state_dir == PROJECT / "state" / "here"


def test_azblob_needs_a_key_vault_provider() -> None:
    with pytest.raises(UserError, match=r"secretsProvider = \(not set\): .*needs an Azure Key Vault secrets provider"):
        _resolve(backend_flag="azblob://state?storage_account=stteam01")
    with pytest.raises(UserError, match=r'secretsProvider = "passphrase" \(from --secrets-provider\)') as raised:
        _resolve(backend_flag="azblob://state?storage_account=stteam01", secrets_provider_flag="passphrase")
    # The problem is carried whole, for the JSON error document: field, value, rule, fix, where set.
    [problem] = raised.value.problems
    assert (problem.path, problem.value, problem.source) == ("secretsProvider", "passphrase", "from --secrets-provider")
    assert "Key Vault" in problem.rule and "azurekeyvault://" in problem.fix
    vault = "azurekeyvault://kv-team.vault.azure.net/keys/pulumi"
    target = _resolve(backend_flag="azblob://state?storage_account=stteam01", secrets_provider_flag=vault)
    assert (target.backend_kind, target.secrets_provider, target.local_state_dir) == ("azblob", vault, None)


def test_azblob_needs_to_know_the_storage_account() -> None:
    vault = "azurekeyvault://kv-team.vault.azure.net/keys/pulumi"
    with pytest.raises(UserError, match=r"storage_account=<account>, or export AZURE_STORAGE_ACCOUNT"):
        _resolve(backend_flag="azblob://state", secrets_provider_flag=vault)
    target = _resolve(backend_flag="azblob://state", secrets_provider_flag=vault, env={"AZURE_STORAGE_ACCOUNT": "st1"})
    assert target.backend_kind == "azblob"


def test_pulumi_cloud_uses_the_service_secrets_by_default() -> None:
    target = _resolve(backend_flag="https://api.pulumi.com")
    assert (target.backend_kind, target.secrets_provider, target.uses_passphrase) == ("cloud", None, False)


def test_default_secrets_provider_word_means_the_backends_own() -> None:
    assert _resolve(secrets_provider_flag="default").secrets_provider == "passphrase"
    assert _resolve(backend_flag="https://api.pulumi.com", secrets_provider_flag="default").secrets_provider is None


def test_unsupported_backend_and_provider_are_named() -> None:
    with pytest.raises(UserError, match=r'backend = "s3://bucket" \(from --backend\): aksgpu supports file://'):
        _resolve(backend_flag="s3://bucket")
    with pytest.raises(UserError, match=r'secretsProvider = "vault:/x" \(from --secrets-provider\): not a secrets'):
        _resolve(secrets_provider_flag="vault:/x")


def test_a_new_provider_for_an_existing_stack_is_refused() -> None:
    with pytest.raises(UserError, match=r'records the secrets provider "passphrase".*change-secrets-provider'):
        _resolve(recorded_provider="passphrase",
                 secrets_provider_flag="azurekeyvault://kv-a.vault.azure.net/keys/pulumi")


def _write_environments(project: Path, text: str) -> None:
    (project / "stacks" / "environments.yaml").write_text(text)


def test_environments_yaml_settings_reach_the_target(project: Path) -> None:
    _write_environments(project, """
defaults:
  backend: azblob://state?storage_account=stteam01
  secretsProvider: azurekeyvault://kv-team.vault.azure.net/keys/pulumi
environments:
  dev:
    preset: dev
    secretsProvider: azurekeyvault://kv-dev.vault.azure.net/keys/pulumi
""")
    dev = target_for(resolve_stack("dev"), backend_flag=None, secrets_provider_flag=None, env={})
    assert dev.backend_url == "azblob://state?storage_account=stteam01"
    assert dev.secrets_provider == "azurekeyvault://kv-dev.vault.azure.net/keys/pulumi"
    # A stack file that environments.yaml does not list still gets the shared defaults.
    unlisted = target_for(resolve_stack("vault"), backend_flag=None, secrets_provider_flag=None, env={})
    assert unlisted.secrets_provider == "azurekeyvault://kv-team.vault.azure.net/keys/pulumi"
    flagged = target_for(resolve_stack("dev"), backend_flag="file://x", secrets_provider_flag="passphrase", env={})
    assert (flagged.backend_kind, flagged.secrets_provider) == ("file", "passphrase")


def test_stack_file_records_its_provider(project: Path) -> None:
    path = project / "stacks" / "Pulumi.dev.yaml"
    path.write_text("encryptionsalt: v1:c2FsdA==:v1:abc\n" + path.read_text())
    target = target_for(resolve_stack("dev"), backend_flag=None, secrets_provider_flag=None, env={})
    assert (target.secrets_provider, target.secrets_source) == ("passphrase", "recorded in Pulumi.dev.yaml")


def test_a_stack_file_outside_stacks_is_refused(project: Path) -> None:
    shutil.copy(project / "stacks" / "Pulumi.dev.yaml", project / "Pulumi.loose.yaml")
    with pytest.raises(UserError, match=r"^STACK argument = \"Pulumi.loose.yaml\": not in stacks/, where Pulumi "
                                        r"reads stack files .* Fix: move it there, or pass the environment name"):
        target_for(resolve_stack("Pulumi.loose.yaml"), backend_flag=None, secrets_provider_flag=None, env={})


# --- prerequisites ---------------------------------------------------------------------------


@pytest.mark.parametrize(("env", "config", "az", "expected"), [
    (SERVICE_PRINCIPAL, {}, False, "a service principal secret (ARM_CLIENT_SECRET)"),
    ({**SERVICE_PRINCIPAL, "ARM_CLIENT_SECRET": ""}, {}, False, None),
    ({"ARM_CLIENT_ID": "c", "ARM_TENANT_ID": "t", "ARM_SUBSCRIPTION_ID": "s", "ARM_USE_OIDC": "true"}, {}, False,
     "OIDC federation (ARM_USE_OIDC)"),
    ({"ARM_USE_OIDC": "true", "ARM_SUBSCRIPTION_ID": "s"}, {}, False, None),  # OIDC needs client and tenant
    ({"ARM_USE_MSI": "true", "ARM_SUBSCRIPTION_ID": "s"}, {}, False, "a managed identity (ARM_USE_MSI)"),
    ({"ARM_USE_MSI": "false", "ARM_SUBSCRIPTION_ID": "s"}, {}, False, None),
    ({}, {"azure-native:clientId": "c", "azure-native:tenantId": "t", "azure-native:subscriptionId": "s",
          "azure-native:clientCertificatePath": "/c.pfx"}, False,
     "a service principal certificate (ARM_CLIENT_CERTIFICATE_PATH)"),
    ({}, {}, True, "the Azure CLI (az login)"),
    ({}, {}, False, None),
])
def test_azure_credentials(env: dict[str, str], config: dict[str, Any], az: bool, expected: str | None) -> None:
    assert azure_credential_source(env, config, az) == expected


def _which(*found: str):  # noqa: ANN202 - a which() stand-in for the pure check
    return lambda name: f"/usr/bin/{name}" if name in found else None


def test_readiness_names_every_missing_prerequisite() -> None:
    problems = check_readiness(_resolve(), env={}, config={}, needs_azure=True, which=_which()).problems
    assert len(problems) == 3
    assert "Pulumi CLI is not on PATH" in problems[0] and "get.pulumi.com" in problems[0]
    assert "no Azure credentials" in problems[1] and "az login" in problems[1]
    assert "PULUMI_CONFIG_PASSPHRASE" in problems[2] and "local file backend" in problems[2]


def test_state_only_commands_need_no_azure_credentials() -> None:
    env = {"PULUMI_CONFIG_PASSPHRASE": ""}  # an empty passphrase is a passphrase to Pulumi
    assert check_readiness(_resolve(), env=env, config={}, needs_azure=False, which=_which("pulumi")).problems == []
    needs_azure = check_readiness(_resolve(), env=env, config={}, needs_azure=True, which=_which("pulumi")).problems
    assert len(needs_azure) == 1 and needs_azure[0].startswith("no Azure credentials")


def test_key_vault_secrets_need_no_passphrase() -> None:
    target = _resolve(secrets_provider_flag="azurekeyvault://kv-a.vault.azure.net/keys/pulumi")
    assert check_readiness(target, env=SERVICE_PRINCIPAL, config={}, needs_azure=True,
                           which=_which("pulumi")).problems == []


def test_pulumi_cloud_needs_a_login(tmp_path: Path) -> None:
    target = _resolve(backend_flag="https://api.pulumi.com")
    problems = check_readiness(target, env=SERVICE_PRINCIPAL, config={}, needs_azure=True, which=_which("pulumi"),
                               pulumi_home=tmp_path).problems
    assert len(problems) == 1 and "pulumi login https://api.pulumi.com" in problems[0]
    (tmp_path / "credentials.json").write_text(json.dumps({"accessTokens": {"https://api.pulumi.com": "pul-x"}}))
    assert check_readiness(target, env=SERVICE_PRINCIPAL, config={}, needs_azure=True, which=_which("pulumi"),
                           pulumi_home=tmp_path).problems == []


def test_the_automation_api_stops_at_a_missing_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real pulumi.automation path, as far as it goes without a CLI: `pulumi version` is not found."""
    _path_with(tmp_path, monkeypatch, fake_pulumi=False)
    target = resolve_target("dev", tmp_path, tmp_path / "stacks" / "Pulumi.dev.yaml", env={})
    with pytest.raises(UserError, match=r"the Pulumi CLI is not on PATH"):
        open_stack(target, create=True)
    assert (tmp_path / ".pulumi-state").is_dir()  # the local backend's folder is made first


# --- the commands, up to the Pulumi CLI ------------------------------------------------------


def test_register_adds_the_commands(app: typer.Typer) -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("preview", "up", "destroy", "refresh", "outputs", "kubeconfig", "backend"):
        assert f" {command} " in result.output
    assert "bootstrap" in runner.invoke(app, ["backend", "--help"]).output


def test_missing_pulumi_cli_is_one_clear_message(app: typer.Typer, project: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _path_with(tmp_path, monkeypatch, fake_pulumi=False)
    for name, value in {**SERVICE_PRINCIPAL, "PULUMI_CONFIG_PASSPHRASE": "p"}.items():
        monkeypatch.setenv(name, value)
    for command in (["preview", "dev"], ["refresh", "dev"], ["up", "dev", "--yes"], ["outputs", "dev"],
                    ["kubeconfig", "dev"]):
        result = runner.invoke(app, command)
        assert result.exit_code == 2, (command, result.output)
        assert result.output.startswith("error: the Pulumi CLI is not on PATH"), result.output
        assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)
    assert "aksgpu plan dev" in runner.invoke(app, ["preview", "dev"]).output


def test_missing_azure_credentials_and_passphrase(app: typer.Typer, project: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    _path_with(tmp_path, monkeypatch, fake_pulumi=True)
    result = runner.invoke(app, ["preview", "dev"])
    assert result.exit_code == 2
    assert "cannot run: 2 things are missing" in result.output
    assert "no Azure credentials" in result.output and "PULUMI_CONFIG_PASSPHRASE" in result.output
    assert "Pulumi CLI is not on PATH" not in result.output
    assert "aksgpu plan dev" in result.output and "Traceback" not in result.output


def test_preview_stops_at_spec_errors_before_pulumi(app: typer.Typer, project: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    _path_with(tmp_path, monkeypatch, fake_pulumi=False)
    spec = {**base_spec(), "controlPlane": {"tier": "Gold"}}
    (project / "stacks" / "Pulumi.bad.yaml").write_text(yaml.safe_dump({"config": {"aksgpu:cluster": spec}}))
    result = runner.invoke(app, ["preview", "bad"])
    assert result.exit_code == 1 and 'controlPlane.tier = "Gold"' in result.output
    assert "Pulumi CLI" not in result.output


@pytest.mark.parametrize("command", ["up", "destroy"])
def test_no_terminal_and_no_yes_refuses(app: typer.Typer, project: Path, command: str) -> None:
    result = runner.invoke(app, [command, "dev"])  # the runner's stdin is not a terminal
    assert result.exit_code == 2
    assert "stdin is not a terminal" in result.output and "--yes" in result.output


def test_destroy_of_a_protected_stack_is_refused(app: typer.Typer, project: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _path_with(tmp_path, monkeypatch, fake_pulumi=True)
    for name, value in {**SERVICE_PRINCIPAL, "PULUMI_CONFIG_PASSPHRASE": "p"}.items():
        monkeypatch.setenv(name, value)
    result = runner.invoke(app, ["destroy", "vault", "--yes"])
    assert result.exit_code == 2
    assert "stack vault is protected" in result.output
    assert "set protect: false" in result.output and "aksgpu up vault" in result.output
    assert "Traceback" not in result.output


def test_protected_resources_in_state() -> None:
    deployment = {"resources": [{"urn": "urn:a", "protect": True}, {"urn": "urn:b"},
                                {"urn": "urn:c", "protect": False}]}
    assert protected_in_state(deployment) == ["urn:a"]
    assert protected_in_state(None) == []


# --- engine results and errors ---------------------------------------------------------------


def test_change_summary() -> None:
    from pulumi.automation import OpType

    changes = summarize_changes({OpType.CREATE: 3, OpType.SAME: 5, OpType.UPDATE: 0})
    assert changes == {"create": 3, "same": 5} and has_changes(changes)
    assert describe_changes(changes) == "3 to create, 5 unchanged"
    assert not has_changes({"same": 7, "read": 1})
    assert describe_changes({"same": 7}) == "no changes (7 unchanged)"


def test_automation_errors_become_one_message() -> None:
    from pulumi.automation import (
        CommandError,
        ConcurrentUpdateError,
        StackNotFoundError,
    )
    from pulumi.automation._cmd import CommandResult

    target = _resolve()
    locked = automation_error_message(ConcurrentUpdateError(CommandResult("", "locked", 255)), target, "up")
    assert locked is not None and "locked by another update" in locked and "pulumi cancel --stack dev" in locked
    missing = automation_error_message(StackNotFoundError(CommandResult("", "no stack named dev found", 255)),
                                       target, "stack output")
    assert missing is not None and "does not exist in the backend" in missing and "aksgpu up dev" in missing
    failed = CommandError(CommandResult("", "error: update failed\nerror: quota exceeded for NCadsH100v5", 255))
    assert automation_error_message(failed, target, "up") == (
        "`pulumi up` failed for stack dev: quota exceeded for NCadsH100v5. The engine's full output is above.")
    assert automation_error_message(ValueError("not Pulumi's"), target, "up") is None


def test_first_error_line_skips_the_generic_summary() -> None:
    assert first_error_line("x\n  error: preview failed\n    error: the resource group was not found\n") == \
        "the resource group was not found"
    assert first_error_line("all good") is None
    assert first_error_line("\n code: 255\n stdout: \n stderr: error: incorrect passphrase") == "incorrect passphrase"


def test_outputs_mask_secrets() -> None:
    values = {"clusterName": ("gpu-dev", False), "kubeconfig": ("apiVersion: v1\nkind: Config\n", True)}
    assert outputs_document(values, show_secrets=False) == {"clusterName": "gpu-dev", "kubeconfig": "[secret]"}
    assert outputs_document(values, show_secrets=True)["kubeconfig"].startswith("apiVersion: v1")
    text = outputs_text(values, show_secrets=False)
    assert "clusterName  gpu-dev" in text and "kubeconfig   [secret]  (--show-secrets to print)" in text
    assert "    kind: Config" in outputs_text(values, show_secrets=True)


# --- kubeconfig ------------------------------------------------------------------------------

AKS_CLIENT_ID = "80faf920-1908-4b52-b5ef-a8e7bedfc67a"
TENANT_ID = "72f988bf-86f1-41af-91ab-2d7cd011db47"


def _aks_kubeconfig(args: list[str] | None = None) -> dict[str, Any]:
    """The shape of listClusterUserCredential?format=exec for an Entra ID cluster."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "gpu-dev", "cluster": {"certificate-authority-data": "Q0E=",
                                                     "server": "https://gpu-dev-abc.hcp.eastus2.azmk8s.io:443"}}],
        "contexts": [{"name": "gpu-dev", "context": {"cluster": "gpu-dev", "user": "clusterUser_rg-gpu-dev_gpu-dev"}}],
        "current-context": "gpu-dev",
        "preferences": {},
        "users": [{"name": "clusterUser_rg-gpu-dev_gpu-dev", "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": "kubelogin",
            "args": args if args is not None else [
                "get-token", "--environment", "AzurePublicCloud", "--server-id", AKS_AAD_SERVER_ID,
                "--client-id", AKS_CLIENT_ID, "--tenant-id", TENANT_ID, "--login", "devicecode"],
            "env": None,
            "installHint": "install kubelogin\n",
            "provideClusterInfo": False,
        }}}],
    }


def _user_exec(text: str, index: int = 0) -> dict[str, Any]:
    return yaml.safe_load(text)["users"][index]["user"]["exec"]


def test_kubeconfig_switches_to_azure_cli_login() -> None:
    result = kubeconfig_for_login(yaml.safe_dump(_aks_kubeconfig()), "azurecli")
    exec_config = _user_exec(result.text)
    assert exec_config["args"] == ["get-token", "--login", "azurecli", "--server-id", AKS_AAD_SERVER_ID]
    assert exec_config["command"] == "kubelogin" and exec_config["installHint"] == "install kubelogin\n"
    assert result.converted_users == ["clusterUser_rg-gpu-dev_gpu-dev"] and result.current_context == "gpu-dev"
    document = yaml.safe_load(result.text)
    assert document["clusters"] == _aks_kubeconfig()["clusters"]  # only the user entry changes


def test_kubeconfig_keeps_what_devicecode_needs() -> None:
    exec_config = _user_exec(kubeconfig_for_login(yaml.safe_dump(_aks_kubeconfig()), "devicecode").text)
    assert exec_config["args"] == ["get-token", "--login", "devicecode", "--server-id", AKS_AAD_SERVER_ID,
                                   "--client-id", AKS_CLIENT_ID, "--tenant-id", TENANT_ID,
                                   "--environment", "AzurePublicCloud"]


def test_kubeconfig_keeps_its_own_server_id_and_defaults_to_the_aks_one() -> None:
    custom = _aks_kubeconfig(["get-token", "--server-id", "11111111-2222-3333-4444-555555555555"])
    assert _user_exec(kubeconfig_for_login(yaml.safe_dump(custom), "msi").text)["args"] == \
        ["get-token", "--login", "msi", "--server-id", "11111111-2222-3333-4444-555555555555"]
    bare = _aks_kubeconfig(["get-token"])
    assert _user_exec(kubeconfig_for_login(yaml.safe_dump(bare), "workloadidentity").text)["args"] == \
        ["get-token", "--login", "workloadidentity", "--server-id", AKS_AAD_SERVER_ID]


def test_kubeconfig_converts_the_legacy_azure_auth_provider() -> None:
    document = _aks_kubeconfig()
    document["users"][0]["user"] = {"auth-provider": {"name": "azure", "config": {
        "apiserver-id": AKS_AAD_SERVER_ID, "client-id": AKS_CLIENT_ID, "tenant-id": TENANT_ID,
        "environment": "AzurePublicCloud", "config-mode": "1"}}}
    user = yaml.safe_load(kubeconfig_for_login(yaml.safe_dump(document), "spn").text)["users"][0]["user"]
    assert "auth-provider" not in user
    assert user["exec"]["args"] == ["get-token", "--login", "spn", "--server-id", AKS_AAD_SERVER_ID,
                                    "--client-id", AKS_CLIENT_ID, "--tenant-id", TENANT_ID,
                                    "--environment", "AzurePublicCloud"]


def test_kubeconfig_leaves_local_accounts_and_accepts_base64() -> None:
    document = _aks_kubeconfig()
    document["users"].append({"name": "clusterAdmin", "user": {"client-certificate-data": "Y2VydA==",
                                                               "client-key-data": "a2V5"}})
    encoded = base64.b64encode(yaml.safe_dump(document).encode()).decode()
    result = kubeconfig_for_login(encoded, "azurecli")
    assert result.other_users == ["clusterAdmin"]
    assert yaml.safe_load(result.text)["users"][1] == document["users"][1]


def test_kubeconfig_errors_are_clear() -> None:
    with pytest.raises(UserError, match=r"no --tenant-id, which --login devicecode needs.*--login azurecli"):
        kubeconfig_for_login(yaml.safe_dump(_aks_kubeconfig(["get-token", "--client-id", AKS_CLIENT_ID])),
                             "devicecode")
    with pytest.raises(UserError, match=r"is not a kubeconfig"):
        kubeconfig_for_login("just text", "azurecli")
    with pytest.raises(ValueError):
        kubeconfig_for_login(yaml.safe_dump(_aks_kubeconfig()), "password")


def test_write_kubeconfig(tmp_path: Path) -> None:
    path = tmp_path / "kube" / "aksgpu-dev.yaml"
    assert write_kubeconfig(path, "a: 1\n", force=False) == "written"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.read_text() == "a: 1\n"
    assert write_kubeconfig(path, "a: 1\n", force=False) == "unchanged"
    with pytest.raises(UserError, match=r"already exists and differs.*--force"):
        write_kubeconfig(path, "a: 2\n", force=False)
    assert path.read_text() == "a: 1\n"
    assert write_kubeconfig(path, "a: 2\n", force=True) == "replaced"
    assert path.read_text() == "a: 2\n" and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["aksgpu-dev.yaml"]  # no temporary files left


# --- backend bootstrap -----------------------------------------------------------------------

BOOTSTRAP = ["backend", "bootstrap", "-g", "rg-pulumi-state", "-l", "eastus2", "--storage-account", "stpulumistate01",
             "--container", "pulumi-state", "--key-vault", "kv-pulumi-state"]


def test_bootstrap_prints_the_commands(app: typer.Typer, tmp_path: Path) -> None:
    result = runner.invoke(app, BOOTSTRAP)
    assert result.exit_code == 0, result.output
    script = result.output
    for expected in (
        "az group create --name rg-pulumi-state --location eastus2",
        "--kind StorageV2", "--min-tls-version TLS1_2", "--allow-blob-public-access false",
        "--allow-shared-key-access false", "--enable-versioning true", "--enable-delete-retention true",
        "--enable-container-delete-retention true", "az storage container-rm create",
        "--enable-rbac-authorization true", "--enable-purge-protection true",
        "--kty RSA", "--role 'Storage Blob Data Contributor'", "--role 'Key Vault Crypto User'",
        '"/subscriptions/${SUBSCRIPTION_ID}/resourceGroups/rg-pulumi-state/providers/Microsoft.Storage/'
        'storageAccounts/stpulumistate01"',
        "#     backend: azblob://pulumi-state?storage_account=stpulumistate01",
        "#     secretsProvider: azurekeyvault://kv-pulumi-state.vault.azure.net/keys/pulumi-secrets",
    ):
        assert expected in script, expected
    (tmp_path / "bootstrap.sh").write_text(script)
    assert subprocess.run(["bash", "-n", str(tmp_path / "bootstrap.sh")]).returncode == 0


def test_bootstrap_for_another_assignee_as_json(app: typer.Typer) -> None:
    result = runner.invoke(app, [*BOOTSTRAP, "--assignee", "ci-bot@contoso.com", "--key", "state-key", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["environments"]["defaults"] == {
        "backend": "azblob://pulumi-state?storage_account=stpulumistate01",
        "secretsProvider": "azurekeyvault://kv-pulumi-state.vault.azure.net/keys/state-key"}
    grants = [step["command"] for step in document["steps"]
              if step["command"][:4] == ["az", "role", "assignment", "create"]]
    roles = {command[command.index("--role") + 1]: command for command in grants}
    assert set(roles) == {"Key Vault Crypto Officer", "Storage Blob Data Contributor", "Key Vault Crypto User"}
    assert "ci-bot@contoso.com" in roles["Key Vault Crypto User"]
    assert "ci-bot@contoso.com" not in roles["Key Vault Crypto Officer"]  # only you create the key


def test_bootstrap_rejects_bad_names(app: typer.Typer) -> None:
    result = runner.invoke(app, ["backend", "bootstrap", "-g", "rg.", "-l", "East US", "--storage-account",
                                 "St-Pulumi", "--container", "Pulumi_State", "--key-vault", "1vault"])
    assert result.exit_code == 2
    for option in ("--resource-group", "--location", "--storage-account", "--container", "--key-vault"):
        assert f"  - {option} = " in result.output, option
    assert "the command line has 5 problems" in result.output and "  - --key " not in result.output
    assert "3-24 lowercase letters and digits" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(("field", "value", "valid"), [
    ("storage_account", "abc", True), ("storage_account", "ab", False), ("storage_account", "a" * 25, False),
    ("key_vault", "kv-a1", True), ("key_vault", "kv--a", False), ("key_vault", "kv-", False),
    ("key_vault", "a" * 25, False),
    ("container", "pulumi-state", True), ("container", "-state", False), ("container", "a--b", False),
    ("container", "a" * 64, False), ("key", "k1-x", True), ("key", "k_1", False),
])
def test_bootstrap_name_rules(field: str, value: str, valid: bool) -> None:
    settings = {"resource_group": "rg", "location": "eastus2", "storage_account": "stpulumi01",
                "container": "pulumi-state", "key_vault": "kv-pulumi", "key": "pulumi-secrets", field: value}
    assert (bootstrap_problems(BootstrapSettings(**settings)) == []) is valid


def test_bootstrap_apply_needs_az(app: typer.Typer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _path_with(tmp_path, monkeypatch, fake_pulumi=False)
    result = runner.invoke(app, [*BOOTSTRAP, "--apply"])
    assert result.exit_code == 2 and "az is not on PATH" in result.output and "drop --apply" in result.output


def test_bootstrap_apply_runs_the_steps_in_order() -> None:
    """The runner's own logic (placeholders, skipping an existing key, stopping at a failure) with a stand-in for az."""
    settings = BootstrapSettings("rg", "eastus2", "stpulumi01", "pulumi-state", "kv-pulumi")
    calls: list[list[str]] = []

    def run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        output = {"account": "sub-123\n", "ad": "user-456\n"}.get(argv[1], "")
        return subprocess.CompletedProcess(argv, 0, output, "")

    run_bootstrap(settings, say=lambda *_: None, run=run, sleep=lambda _: None)
    assert not any("key" in call[:3] and "create" in call for call in calls)  # key exists: `key show` succeeded
    grants = [call for call in calls if call[1:3] == ["role", "assignment"]]
    assert all("/subscriptions/sub-123/resourceGroups/rg/" in call[call.index("--scope") + 1] for call in grants)
    assert all("user-456" in call for call in grants)

    def failing(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        if argv[1] == "storage":
            return subprocess.CompletedProcess(argv, 1, "", "ERROR: (StorageAccountAlreadyTaken) name is taken")
        return run(argv, **kwargs)

    with pytest.raises(UserError, match=r"(?s)step 4 failed: az storage account create.*StorageAccountAlreadyTaken"):
        run_bootstrap(settings, say=lambda *_: None, run=failing, sleep=lambda _: None)


def test_bootstrap_steps_and_script_agree() -> None:
    settings = BootstrapSettings("rg", "eastus2", "stpulumi01", "pulumi-state", "kv-pulumi")
    script = bootstrap_script(settings)
    for number, step in enumerate(bootstrap_steps(settings), start=1):
        assert f"# {number}. {step.description}\n" in script
    assert "set -euo pipefail" in script and 'SUBSCRIPTION_ID="$(az account show' in script
    assert "if ! az keyvault key show --vault-name kv-pulumi --name pulumi-secrets --output none 2>/dev/null; then" \
        in script


def test_up_refuses_a_stack_file_out_of_date_with_environments_yaml(app: typer.Typer, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    project_dir = tmp_path / "full"
    shutil.copytree(EXAMPLE / "stacks", project_dir / "stacks")
    shutil.copy(EXAMPLE / "Pulumi.yaml", project_dir / "Pulumi.yaml")
    environments = project_dir / "stacks" / "environments.yaml"
    environments.write_text(environments.read_text().replace("name: gpu-dev", "name: gpu-dev2"))
    monkeypatch.chdir(project_dir)
    _path_with(tmp_path, monkeypatch, fake_pulumi=False)
    result = runner.invoke(app, ["up", "dev", "--yes"])
    assert result.exit_code == 2
    assert "Pulumi.dev.yaml is out of date with stacks/environments.yaml" in result.output
    assert "aksgpu render dev" in result.output and "Pulumi CLI" not in result.output
    # preview only warns, then goes on to its own checks (here: the missing CLI).
    result = runner.invoke(app, ["preview", "dev"])
    assert "warning: Pulumi.dev.yaml is not what `aksgpu render dev` would write" in result.output
    assert result.exit_code == 2 and "Pulumi CLI is not on PATH" in result.output


def test_a_policy_pack_must_be_a_policy_pack_folder(tmp_path: Path) -> None:
    from aksgpu.cli.workflow.runner import policy_packs

    with pytest.raises(UserError, match="no PulumiPolicy.yaml there"):
        policy_packs([tmp_path])
    (tmp_path / "PulumiPolicy.yaml").write_text("runtime: python\n")
    assert policy_packs([tmp_path]) == [str(tmp_path.resolve())]
    assert policy_packs(None) is None


def test_aksgpus_own_pack_gets_the_environments_waivers_and_other_packs_an_empty_configuration(tmp_path: Path) -> None:
    from aksgpu.cli.workflow.runner import policy_options
    from aksgpu.spec import parse_cluster_spec
    from tests.helpers import base_spec, edit

    ours, theirs = tmp_path / "policy", tmp_path / "other"
    for folder in (ours, theirs):
        folder.mkdir()
        (folder / "PulumiPolicy.yaml").write_text("runtime: python\n")
    (ours / "__main__.py").write_text("from aksgpu.policy.pack import run\n\nrun()\n")
    (theirs / "__main__.py").write_text("from pulumi_policy import PolicyPack\n")
    waiver = {"rule": "acr-public-network", "resources": ["*"], "reason": "pushed from laptops in this test",
              "expires": "2027-01-31"}
    spec, _ = parse_cluster_spec(edit(base_spec(), "policy", {"waivers": [waiver]}))
    with policy_options([ours, theirs], spec) as options:
        assert options["policy_packs"] == [str(ours.resolve()), str(theirs.resolve())]
        configs = [json.loads(Path(path).read_text()) for path in options["policy_pack_configs"]]
        written = options["policy_pack_configs"]
    assert configs == [{"acr-public-network": {"waivers": [
        {"resources": ["*"], "reason": "pushed from laptops in this test", "expires": "2027-01-31"}]}}, {}]
    assert not any(Path(path).exists() for path in written), "the configuration files go with the run"
    with policy_options(None, spec) as options:
        assert options == {}
