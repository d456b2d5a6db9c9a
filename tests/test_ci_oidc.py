"""`aksgpu ci oidc ENV`: the CI identities as az commands. No Azure here: the tests read the
commands, run the printed script against a stand-in `az` on PATH, and run --apply's runner with a
stand-in for subprocess.run."""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from aksgpu.cli.ci.commands import ci_app
from aksgpu.ci.oidc import (
    PROGRAM_ASSIGNED_ROLES,
    ROLE_CONDITION_VARIABLE,
    github_commands,
    identities,
    notes,
    oidc_script,
    oidc_steps,
    program_role_condition,
    role_condition,
    run_oidc,
)
from aksgpu.ci.oidc_settings import (
    GITHUB_OIDC_AUDIENCE,
    GITHUB_OIDC_ISSUER,
    GITHUB_VARIABLES,
    OidcSettings,
    deploy_client_variable,
    input_problems,
    parse_azblob_backend,
    parse_key_vault_provider,
    plan_client_variable,
)
from aksgpu.errors import UserError
from aksgpu import catalog
from tests.helpers import REPO

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("no_cloud_environment")
AZBLOB = "azblob://pulumi-state?storage_account=stpulumistate01"
KEYVAULT = "azurekeyvault://kv-pulumi-state.vault.azure.net/keys/pulumi-secrets"
REPOSITORY = "contoso/gpu-infra"
SUBSCRIPTION = "11111111-2222-3333-4444-555555555555"
ACCOUNT_ID = ("/subscriptions/sub-123/resourceGroups/rg-state/providers/Microsoft.Storage/storageAccounts/"
              "stpulumistate01")
VAULT_ID = "/subscriptions/sub-123/resourceGroups/rg-state/providers/Microsoft.KeyVault/vaults/kv-pulumi-state"
PLAN_ROLES = {"Reader", "Azure Kubernetes Service Cluster User Role", "Storage Blob Data Reader",
              "Key Vault Crypto User"}
DEPLOY_ROLES = {"Contributor", "Role Based Access Control Administrator", "Storage Blob Data Contributor",
                "Key Vault Crypto User"}

# A stand-in for az: logs each call (arguments split by \x1f, calls by \x1e) and answers like az
# would on a first run, or, with FAKE_AZ_EXISTING set, as if everything existed already.
FAKE_AZ = f"""#!/bin/bash
printf '%s\\x1f' "$@" >> "$FAKE_AZ_LOG"; printf '\\x1e' >> "$FAKE_AZ_LOG"
case "$*" in
  "account show"*"--query id"*) echo sub-123 ;;
  "account show"*"--query tenantId"*) echo tenant-456 ;;
  "storage account list"*) echo {ACCOUNT_ID} ;;
  "keyvault list"*) echo {VAULT_ID} ;;
  "ad app list"*) [ -n "$FAKE_AZ_EXISTING" ] && echo "old-app-$5" ;;
  "ad app create"*) echo "app-$5" ;;
  "ad sp list"*) [ -n "$FAKE_AZ_EXISTING" ] && echo "old-sp" ;;
  "ad sp create"*) echo "sp-$5" ;;
  "ad app federated-credential list"*) [ -n "$FAKE_AZ_EXISTING" ] && echo github-credential ;;
  "role assignment list"*) [ -n "$FAKE_AZ_EXISTING" ] && echo /an/assignment ;;
esac
exit 0
"""


@pytest.fixture
def app() -> typer.Typer:
    return ci_app


def _configure(project: Path, *, backend: str | None = AZBLOB, secrets: str | None = KEYVAULT,
               dev: dict[str, Any] | None = None, environments: dict[str, Any] | None = None) -> None:
    """Set the shared backend and secrets provider in the copied environments.yaml, and change dev's overrides."""
    path = project / "stacks" / "environments.yaml"
    document = yaml.safe_load(path.read_text())
    for key, value in (("backend", backend), ("secretsProvider", secrets)):
        if value is not None:
            document["defaults"][key] = value
    document["environments"]["dev"]["overrides"].update(dev or {})
    document["environments"].update(environments or {})
    path.write_text(yaml.safe_dump(document, sort_keys=False))


def _settings(**changes: Any) -> OidcSettings:
    settings: dict[str, Any] = {
        "environment": "dev", "repo": REPOSITORY, "resource_group": "rg-gpu-dev", "creates_resource_group": True,
        "backend_url": AZBLOB, "storage_account": "stpulumistate01", "container": "pulumi-state",
        "key_vault": "kv-pulumi-state", "key": "pulumi-secrets"}
    return OidcSettings(**{**settings, **changes})


def _fake_az(tmp_path: Path) -> tuple[Path, Path]:
    """A folder with the stand-in az, and the log it writes."""
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "az").write_text(FAKE_AZ)
    (bin_dir / "az").chmod(0o755)
    return bin_dir, tmp_path / "az.log"


def _calls(log: Path) -> list[list[str]]:
    records = log.read_text().split("\x1e")[:-1] if log.exists() else []
    return [record.split("\x1f")[:-1] for record in records]


def _option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def _grants(document: dict[str, Any], kind: str) -> dict[str, str]:
    identity = next(item for item in document["identities"] if item["kind"] == kind)
    return {grant["role"]: grant["scope"] for grant in identity["roles"]}


# --- through the command ---------------------------------------------------------------------


def test_prints_a_script_that_bash_accepts(app: typer.Typer, project: Path, tmp_path: Path) -> None:
    _configure(project)
    result = runner.invoke(app, ["oidc", "dev", "--repo", REPOSITORY])
    assert result.exit_code == 0, result.output
    script = result.output
    for expected in (
        "set -euo pipefail",
        "az ad app list --display-name aksgpu-gpu-infra-dev-plan --query '[0].appId' --output tsv",
        'PLAN_APP_ID="$(az ad app create --display-name aksgpu-gpu-infra-dev-plan --sign-in-audience AzureADMyOrg',
        'DEPLOY_SP_ID="$(az ad sp create --id "${DEPLOY_APP_ID}" --query id --output tsv)"',
        '"subject": "repo:contoso/gpu-infra:pull_request"',
        '"subject": "repo:contoso/gpu-infra:ref:refs/heads/main"',
        '"subject": "repo:contoso/gpu-infra:environment:dev"',
        '--condition "${ROLE_CONDITION}"', "--condition-version 2.0",
        '--scope "${STATE_ACCOUNT_ID}/blobServices/default/containers/pulumi-state"',
        '--scope "${VAULT_ID}/keys/pulumi-secrets"',
        'gh variable set AZURE_CLIENT_ID_PLAN_DEV --repo contoso/gpu-infra --body "${PLAN_APP_ID}"',
        'gh variable set AZURE_CLIENT_ID_DEPLOY_DEV --repo contoso/gpu-infra --body "${DEPLOY_APP_ID}"',
        "gh api --method PUT repos/contoso/gpu-infra/environments/dev",
    ):
        assert expected in script, expected
    (tmp_path / "oidc.sh").write_text(script)
    check = subprocess.run(["bash", "-n", str(tmp_path / "oidc.sh")], capture_output=True, text=True,
                           check=False)
    assert check.returncode == 0, check.stderr


def test_the_printed_script_creates_once_and_then_changes_nothing(app: typer.Typer, project: Path,
                                                                  tmp_path: Path) -> None:
    """The script itself, run by bash against the stand-in az: values flow from step to step, the
    condition reaches az as one argument, and a second run (everything exists) creates nothing."""
    _configure(project)
    script = tmp_path / "oidc.sh"
    script.write_text(runner.invoke(app, ["oidc", "dev", "--repo", REPOSITORY]).output)
    bin_dir, log = _fake_az(tmp_path)
    environment = {"PATH": f"{bin_dir}:/usr/bin:/bin", "FAKE_AZ_LOG": str(log)}

    first = subprocess.run(["bash", str(script)], env=environment, capture_output=True, text=True, timeout=60,
                           check=False)
    assert first.returncode == 0, first.stderr
    calls = _calls(log)
    created = [call for call in calls if "create" in call[:4]]
    assert [_option(call, "--display-name") for call in created if call[:3] == ["ad", "app", "create"]] == [
        "aksgpu-gpu-infra-dev-plan", "aksgpu-gpu-infra-dev-deploy"]
    grants = {(_option(call, "--assignee-object-id"), _option(call, "--role")): call
              for call in created if call[:2] == ["role", "assignment"]}
    plan, deploy = "sp-app-aksgpu-gpu-infra-dev-plan", "sp-app-aksgpu-gpu-infra-dev-deploy"
    assert {role for sp, role in grants if sp == plan} == {catalog.role_id(role) for role in PLAN_ROLES}
    assert {role for sp, role in grants if sp == deploy} == {catalog.role_id(role) for role in DEPLOY_ROLES}
    rbac = grants[(deploy, catalog.role_id("Role Based Access Control Administrator"))]
    assert _option(rbac, "--condition") == program_role_condition()
    assert _option(grants[(plan, catalog.role_id("Reader"))], "--scope") == "/subscriptions/sub-123"
    assert _option(grants[(plan, catalog.role_id("Storage Blob Data Reader"))], "--scope") == \
        f"{ACCOUNT_ID}/blobServices/default/containers/pulumi-state"
    assert _option(grants[(deploy, catalog.role_id("Key Vault Crypto User"))], "--scope") == \
        f"{VAULT_ID}/keys/pulumi-secrets"
    credentials = [json.loads(_option(call, "--parameters")) for call in created if "federated-credential" in call]
    assert {(c["subject"], c["issuer"], tuple(c["audiences"])) for c in credentials} == {
        (f"repo:{REPOSITORY}:{kind}", GITHUB_OIDC_ISSUER, (GITHUB_OIDC_AUDIENCE,))
        for kind in ("pull_request", "ref:refs/heads/main", "environment:dev")}
    assert 'gh variable set AZURE_TENANT_ID --repo contoso/gpu-infra --body "tenant-456"' in first.stdout
    assert 'AZURE_CLIENT_ID_DEPLOY_DEV --repo contoso/gpu-infra --body "app-aksgpu-gpu-infra-dev-deploy"' \
        in first.stdout

    log.unlink()
    second = subprocess.run(["bash", str(script)], env={**environment, "FAKE_AZ_EXISTING": "1"},
                            capture_output=True, text=True, timeout=60, check=False)
    assert second.returncode == 0, second.stderr
    assert [call for call in _calls(log) if "create" in call[:4]] == []
    assert 'AZURE_CLIENT_ID_PLAN_DEV --repo contoso/gpu-infra --body "old-app-aksgpu-gpu-infra-dev-plan"' \
        in second.stdout


def test_refuses_the_local_state_backend(app: typer.Typer, project: Path) -> None:
    result = runner.invoke(app, ["oidc", "dev", "--repo", REPOSITORY])  # environments.yaml names no backend
    assert result.exit_code == 2
    assert "local folder" in result.output and "aksgpu backend bootstrap" in result.output
    assert "Traceback" not in result.output
    _configure(project, backend="file://./state", secrets="passphrase")
    result = runner.invoke(app, ["oidc", "dev", "--repo", REPOSITORY])
    assert result.exit_code == 2 and "file://./state" in result.output


def test_bad_options_are_all_named(app: typer.Typer, project: Path) -> None:
    _configure(project)
    result = runner.invoke(app, ["oidc", "dev", "--repo", "https://github.com/contoso/gpu-infra",
                                 "--branch", "refs/heads/main", "--subscription", "my-subscription"])
    assert result.exit_code == 2
    assert "the command line has 3 problems" in result.output
    for option in ("--repo", "--branch", "--subscription"):
        assert f"  - {option} = " in result.output, option
    assert runner.invoke(app, ["oidc", "dev"]).exit_code == 2  # --repo is required


@pytest.mark.parametrize(("repo", "valid"), [
    ("contoso/gpu-infra", True), ("Contoso-Labs/gpu.infra_2", True), ("a/b", True),
    ("contoso", False), ("contoso/", False), ("/gpu-infra", False), ("contoso/gpu/infra", False),
    ("-contoso/gpu-infra", False), ("con--toso/gpu-infra", False), ("contoso/gpu infra", False),
    ("contoso/gpu-infra.git", False), ("contoso/..", False), ("git@github.com:contoso/gpu-infra", False),
    ("a" * 40 + "/gpu-infra", False), ("contoso/" + "r" * 101, False),
])
def test_repository_names(repo: str, valid: bool) -> None:
    assert (input_problems(repo, "main", None) == []) is valid


@pytest.mark.parametrize(("branch", "valid"), [
    ("main", True), ("release/2026.1", True), ("refs/heads/main", False), ("-main", False), ("a..b", False),
    ("main/", False), ("a//b", False), ("main branch", False), ("$(id)", False),
])
def test_branch_names(branch: str, valid: bool) -> None:
    assert (input_problems(REPOSITORY, branch, None) == []) is valid


def test_json_has_identities_steps_and_variables(app: typer.Typer, project: Path) -> None:
    _configure(project)
    result = runner.invoke(app, ["oidc", "dev", "--repo", REPOSITORY, "--branch", "trunk", "--subscription",
                                 SUBSCRIPTION, "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    plan, deploy = document["identities"]
    assert (plan["displayName"], deploy["displayName"]) == ("aksgpu-gpu-infra-dev-plan", "aksgpu-gpu-infra-dev-deploy")
    assert [c["subject"] for c in plan["federatedCredentials"]] == [
        "repo:contoso/gpu-infra:pull_request", "repo:contoso/gpu-infra:ref:refs/heads/trunk"]
    assert [c["subject"] for c in deploy["federatedCredentials"]] == ["repo:contoso/gpu-infra:environment:dev"]
    assert set(_grants(document, "plan")) == PLAN_ROLES and set(_grants(document, "deploy")) == DEPLOY_ROLES
    conditional = [role["role"] for role in deploy["roles"] if role["condition"]]
    assert conditional == ["Role Based Access Control Administrator"]
    assert all(role["roleId"] == catalog.role_id(role["role"]) for role in plan["roles"] + deploy["roles"])
    assert document["variables"] == {ROLE_CONDITION_VARIABLE: program_role_condition()}
    assert document["steps"][0]["command"] == ["az", "account", "show", "--subscription", SUBSCRIPTION,
                                               "--query", "id", "--output", "tsv"]
    assert document["steps"][0]["capture"] == "SUBSCRIPTION_ID"
    assert all(step["lookup"] for step in document["steps"] if "create" in step["command"])  # looks before creating
    assert document["github"]["variables"] == {
        "AZURE_TENANT_ID": "${TENANT_ID}", "AZURE_SUBSCRIPTION_ID": "${SUBSCRIPTION_ID}",
        "AZURE_CLIENT_ID_PLAN_DEV": "${PLAN_APP_ID}", "AZURE_CLIENT_ID_DEPLOY_DEV": "${DEPLOY_APP_ID}"}
    assert any("-f name=trunk" in line for line in document["github"]["commands"])


def test_scope_is_the_group_when_the_spec_does_not_create_it(app: typer.Typer, project: Path) -> None:
    _configure(project, dev={"resourceGroup": {"name": "rg-gpu-dev", "create": False}})
    document = json.loads(runner.invoke(app, ["oidc", "dev", "--repo", REPOSITORY, "--json"]).output)
    group = "/subscriptions/${SUBSCRIPTION_ID}/resourceGroups/rg-gpu-dev"
    for kind, roles in (("plan", ("Reader", "Azure Kubernetes Service Cluster User Role")),
                        ("deploy", ("Contributor", "Role Based Access Control Administrator"))):
        assert {role: _grants(document, kind)[role] for role in roles} == dict.fromkeys(roles, group)
    assert ["az", "group", "show", "--name", "rg-gpu-dev"] == document["steps"][2]["command"][:5]
    assert not any("subscription" in note for note in document["notes"])


def test_scope_is_the_subscription_when_the_spec_creates_the_group(app: typer.Typer, project: Path) -> None:
    _configure(project)  # dev's resourceGroup: create defaults to true
    document = json.loads(runner.invoke(app, ["oidc", "dev", "--repo", REPOSITORY, "--json"]).output)
    assert _grants(document, "deploy")["Contributor"] == "/subscriptions/${SUBSCRIPTION_ID}"
    assert _grants(document, "plan")["Reader"] == "/subscriptions/${SUBSCRIPTION_ID}"
    assert not any(step["command"][:3] == ["az", "group", "show"] for step in document["steps"])
    assert any("whole subscription" in note and "resourceGroup.create: false" in note for note in document["notes"])


def test_pulumi_cloud_state_needs_no_storage_or_key_vault_roles(app: typer.Typer, project: Path) -> None:
    _configure(project, backend="https://api.pulumi.com", secrets=None)
    result = runner.invoke(app, ["oidc", "dev", "--repo", REPOSITORY, "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert set(_grants(document, "plan")) == {"Reader", "Azure Kubernetes Service Cluster User Role"}
    assert set(_grants(document, "deploy")) == {"Contributor", "Role Based Access Control Administrator"}
    assert not any(step["capture"] in ("STATE_ACCOUNT_ID", "VAULT_ID") for step in document["steps"])
    assert any("PULUMI_ACCESS_TOKEN" in note for note in document["notes"])


def test_existing_resources_outside_the_scope_are_named(app: typer.Typer, project: Path) -> None:
    registry = (f"/subscriptions/{SUBSCRIPTION}/resourceGroups/rg-shared/providers/Microsoft.ContainerRegistry/"
                "registries/acrshared1")
    _configure(project, dev={"resourceGroup": {"name": "rg-gpu-dev", "create": False},
                             "registry": {"mode": "existing", "id": registry}})
    result = runner.invoke(app, ["oidc", "dev", "--repo", REPOSITORY])
    assert result.exit_code == 0, result.output
    assert "# Note: registry.id points outside the identities' Azure scope" in result.output
    assert "acrshared1" in result.output and "AcrPull" in result.output


def test_unknown_environment_and_spec_errors(app: typer.Typer, project: Path) -> None:
    _configure(project)
    result = runner.invoke(app, ["oidc", "stage", "--repo", REPOSITORY])
    assert result.exit_code == 2
    assert 'ENVIRONMENT argument = "stage": no environment of that name in stacks/environments.yaml' in result.output
    _configure(project, dev={"location": "East US"})
    result = runner.invoke(app, ["oidc", "dev", "--repo", REPOSITORY])
    assert result.exit_code == 1 and "location" in result.output and "Traceback" not in result.output


def test_environments_that_would_share_a_variable_are_refused(app: typer.Typer, project: Path) -> None:
    _configure(project, environments={"eu-prod": {"preset": "dev"}, "eu_prod": {"preset": "dev"}})
    result = runner.invoke(app, ["oidc", "eu-prod", "--repo", REPOSITORY])
    assert result.exit_code == 2
    assert "eu_prod" in result.output and "AZURE_CLIENT_ID_PLAN_EU_PROD" in result.output


def test_apply_needs_az(app: typer.Typer, project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _configure(project)
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    result = runner.invoke(app, ["oidc", "dev", "--repo", REPOSITORY, "--apply"])
    assert result.exit_code == 2 and "az is not on PATH" in result.output and "drop --apply" in result.output


def test_apply_runs_az_and_prints_what_to_set(app: typer.Typer, project: Path, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    _configure(project)
    bin_dir, log = _fake_az(tmp_path)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("FAKE_AZ_LOG", str(log))
    result = runner.invoke(app, ["oidc", "dev", "--repo", REPOSITORY, "--apply", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["github"]["variables"] == {
        "AZURE_TENANT_ID": "tenant-456", "AZURE_SUBSCRIPTION_ID": "sub-123",
        "AZURE_CLIENT_ID_PLAN_DEV": "app-aksgpu-gpu-infra-dev-plan",
        "AZURE_CLIENT_ID_DEPLOY_DEV": "app-aksgpu-gpu-infra-dev-deploy"}
    # every step once, and a lookup (finding nothing) before each create
    assert len(_calls(log)) == sum(2 if step.lookup else 1 for step in oidc_steps(_settings()))


# --- the pieces ------------------------------------------------------------------------------


def test_subjects() -> None:
    settings = _settings(repo="Contoso/GPU-Infra", branch="release/1", environment="prod")
    assert settings.subjects == {"pull_request": "repo:Contoso/GPU-Infra:pull_request",
                                 "branch": "repo:Contoso/GPU-Infra:ref:refs/heads/release/1",
                                 "environment": "repo:Contoso/GPU-Infra:environment:prod"}
    plan, deploy = identities(settings)
    assert [name for name, _ in plan.credentials] == ["github-pull-request", "github-branch-release-1"]
    assert deploy.credentials == (("github-environment-prod", "repo:Contoso/GPU-Infra:environment:prod"),)
    assert (plan.display_name, deploy.display_name) == ("aksgpu-GPU-Infra-prod-plan", "aksgpu-GPU-Infra-prod-deploy")


def test_plan_is_read_only_and_deploy_may_only_assign_through_the_condition() -> None:
    plan, deploy = identities(_settings())
    assert {grant.role for grant in plan.grants} == PLAN_ROLES
    assert {grant.role for grant in deploy.grants} == DEPLOY_ROLES
    assert not any(grant.conditional for grant in plan.grants)
    assert [grant.role for grant in deploy.grants if grant.conditional] == ["Role Based Access Control Administrator"]


def test_the_in_cluster_layer_gets_kubernetes_rights_through_azure_rbac_or_a_note() -> None:
    plan, deploy = identities(_settings(kubernetes_authorization="azure-rbac"))
    assert {grant.role for grant in plan.grants} - PLAN_ROLES == {"Azure Kubernetes Service RBAC Reader"}
    assert {grant.role for grant in deploy.grants} - DEPLOY_ROLES == {"Azure Kubernetes Service RBAC Cluster Admin"}
    assert not any("adminGroupObjectIds" in note for note in notes(_settings(kubernetes_authorization="azure-rbac")))
    plan, deploy = identities(_settings(kubernetes_authorization="kubernetes-rbac"))
    assert {grant.role for grant in deploy.grants} == DEPLOY_ROLES, "no Azure role reaches Kubernetes RBAC"
    [note] = [n for n in notes(_settings(kubernetes_authorization="kubernetes-rbac")) if "Kubernetes RBAC" in n]
    assert "access.aad.adminGroupObjectIds" in note and "az ad group member add" in note


def test_role_condition_limits_roles_and_principal_types() -> None:
    condition = role_condition(["guid-a", "guid-b"], ("ServicePrincipal",))
    write, delete = condition.split(" AND ((!(")
    assert write.startswith("((!(ActionMatches{'Microsoft.Authorization/roleAssignments/write'})) OR (")
    assert "@Request[Microsoft.Authorization/roleAssignments:RoleDefinitionId] ForAnyOfAnyValues:GuidEquals " \
           "{guid-a, guid-b}" in write
    assert "@Request[Microsoft.Authorization/roleAssignments:PrincipalType] ForAnyOfAnyValues:" \
           "StringEqualsIgnoreCase {'ServicePrincipal'}" in write
    assert delete.startswith("ActionMatches{'Microsoft.Authorization/roleAssignments/delete'})) OR (")
    assert "@Resource[Microsoft.Authorization/roleAssignments:RoleDefinitionId] ForAnyOfAnyValues:GuidEquals " \
           "{guid-a, guid-b}" in delete and "@Request" not in delete
    assert condition.count("(") == condition.count(")") and condition.count("{") == condition.count("}")
    program = program_role_condition()
    assert {catalog.role_id(role) for role in PROGRAM_ASSIGNED_ROLES} == set(
        program.split("GuidEquals {")[1].split("}")[0].split(", "))
    assert "{'ServicePrincipal', 'Group'}" in program


def test_the_condition_covers_every_role_assignment_in_the_example_plans(example_plans: dict[str, Any]) -> None:
    program = program_role_condition()
    assignments = [resource for plan in example_plans.values()
                   for resource in plan.by_type("azure-native:authorization:RoleAssignment")]
    assert len({resource.inputs["roleDefinitionId"] for resource in assignments}) == len(PROGRAM_ASSIGNED_ROLES)
    for resource in assignments:
        assert resource.inputs["roleDefinitionId"].rsplit("/", 1)[-1] in program, resource.name
        assert f"'{resource.inputs['principalType']}'" in program, resource.name


def test_the_role_list_matches_what_components_assign() -> None:
    """A new assign_role(...) in components/ must be added to PROGRAM_ASSIGNED_ROLES (or the deploy
    identity's condition refuses it)."""
    found: set[str] = set()
    for path in (REPO / "aksgpu" / "components").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
                continue
            if node.func.id == "assign_role":
                if any(keyword.arg == "role_definition_id" for keyword in node.keywords):
                    # A custom role (the repair loop's): not for the deploy identity to define or assign
                    # (docs/guides/repair.md, "Deploying mode act": roleDefinitions/write would void the
                    # condition, and the node resource group does not exist before the first deploy);
                    # spec/gpu_repair.py warns that whoever runs the program must be able to.
                    continue
                found |= {keyword.value.value for keyword in node.keywords
                          if keyword.arg == "role" and isinstance(keyword.value, ast.Constant)}
            elif node.func.id == "grant" and len(node.args) > 1 and isinstance(node.args[1], ast.Constant):
                found.add(node.args[1].value)
    assert found == set(PROGRAM_ASSIGNED_ROLES)


def test_plan_can_read_the_cluster_kubeconfig_because_the_program_does() -> None:
    """Reader does not allow listClusterUserCredential; the program calls it in every preview of a
    deployed cluster. When it stops, drop the role from the plan identity."""
    assert "list_managed_cluster_user_credentials" in (REPO / "aksgpu" / "components" / "cluster.py").read_text()
    assert "Azure Kubernetes Service Cluster User Role" in {grant.role for grant in identities(_settings())[0].grants}


def test_backend_and_provider_urls() -> None:
    assert parse_azblob_backend(AZBLOB) == ("pulumi-state", "stpulumistate01")
    assert parse_azblob_backend("azblob://state/team-a?storage_account=st01") == ("state", "st01")
    assert parse_key_vault_provider(KEYVAULT) == ("kv-pulumi-state", "pulumi-secrets")
    assert parse_key_vault_provider("azurekeyvault://kv1.vault.azure.net/keys/k1/0123abcd") == ("kv1", "k1")
    for url in ("azblob://pulumi-state", "azblob://Pulumi_State?storage_account=st01",
                "azblob://state?storage_account=St-01"):
        with pytest.raises(UserError, match="storage_account"):
            parse_azblob_backend(url)
    for url in ("azurekeyvault://kv1.vault.azure.net/secrets/k1", "azurekeyvault://kv1.example.com/keys/k1",
                "azurekeyvault://kv1.vault.azure.net/keys/"):
        with pytest.raises(UserError, match="azurekeyvault://<vault>"):
            parse_key_vault_provider(url)


def test_variable_names() -> None:
    assert GITHUB_VARIABLES["tenant"] == "AZURE_TENANT_ID"
    assert GITHUB_VARIABLES["subscription"] == "AZURE_SUBSCRIPTION_ID"
    assert plan_client_variable("dev") == "AZURE_CLIENT_ID_PLAN_DEV"
    assert deploy_client_variable("eu-prod.2") == "AZURE_CLIENT_ID_DEPLOY_EU_PROD_2"
    lines = github_commands(_settings(environment="eu-prod.2"))
    assert ('gh variable set AZURE_CLIENT_ID_DEPLOY_EU_PROD_2 --repo contoso/gpu-infra --body "${DEPLOY_APP_ID}"'
            in lines)


def test_apply_runner_with_a_stand_in() -> None:
    """run_oidc's own logic: values flow into later commands, existing things are skipped, a missing
    service principal is retried, and a failure names the step and az's message."""
    settings = _settings(creates_resource_group=False)
    calls: list[list[str]] = []
    sleeps: list[float] = []
    attempts = {"sp create": 0}

    def run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        command = " ".join(argv[1:])
        if command.startswith("ad sp create"):
            attempts["sp create"] += 1
            if attempts["sp create"] == 1:
                return subprocess.CompletedProcess(argv, 1, "", "ERROR: application not found (replication)")
        if command.startswith("ad app create"):
            return subprocess.CompletedProcess(argv, 0, f"app-{_option(argv, '--display-name')}\n", "")
        if command.startswith("ad sp create"):
            return subprocess.CompletedProcess(argv, 0, f"sp-{_option(argv, '--id')}\n", "")
        answers = [("account show --query id", "sub-9\n"), ("account show --query tenantId", "tenant-9\n"),
                   ("storage account list", ACCOUNT_ID), ("keyvault list", VAULT_ID),
                   ("ad app list --display-name aksgpu-gpu-infra-dev-deploy", "app-old\n")]  # deploy exists already
        output = next((answer for prefix, answer in answers if command.startswith(prefix)), "")
        return subprocess.CompletedProcess(argv, 0, output, "")

    values = run_oidc(settings, say=lambda *_: None, run=run, sleep=sleeps.append)
    assert values["SUBSCRIPTION_ID"] == "sub-9" and values["DEPLOY_APP_ID"] == "app-old"
    assert values["PLAN_SP_ID"] == "sp-app-aksgpu-gpu-infra-dev-plan"
    assert [call for call in calls if call[1:4] == ["ad", "app", "create"]] == [
        ["az", "ad", "app", "create", "--display-name", "aksgpu-gpu-infra-dev-plan", "--sign-in-audience",
         "AzureADMyOrg", "--query", "appId", "--output", "tsv"]]
    assert len(sleeps) == 1  # one retry of the first `ad sp create`
    assert ["az", "group", "show", "--name", "rg-gpu-dev", "--subscription", "sub-9", "--output", "none"] in calls
    rbac = next(call for call in calls if call[1:4] == ["role", "assignment", "create"] and "--condition" in call)
    assert _option(rbac, "--condition") == program_role_condition()
    assert _option(rbac, "--scope") == "/subscriptions/sub-9/resourceGroups/rg-gpu-dev"
    assert _option(rbac, "--assignee-object-id") == "sp-app-old"
    assert not any("${" in word for call in calls for word in call)

    def failing(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        if argv[1:3] == ["keyvault", "list"]:
            return subprocess.CompletedProcess(argv, 0, "", "")
        return run(argv, **kwargs)

    with pytest.raises(UserError, match="key vault kv-pulumi-state .* is not in the Azure CLI's current subscription"):
        run_oidc(settings, say=lambda *_: None, run=failing, sleep=sleeps.append)

    def forbidden(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        if argv[1:4] == ["role", "assignment", "create"]:
            return subprocess.CompletedProcess(argv, 1, "", "ERROR: (AuthorizationFailed) no access")
        return run(argv, **kwargs)

    with pytest.raises(UserError, match=r"(?s)step \d+ failed: az role assignment create.*AuthorizationFailed"):
        run_oidc(settings, say=lambda *_: None, run=forbidden, sleep=lambda _: None)


def test_script_steps_are_numbered_like_the_steps() -> None:
    settings = _settings()
    script = oidc_script(settings)
    for number, step in enumerate(oidc_steps(settings), start=1):
        assert f"# {number}. {step.description[:40]}" in script
