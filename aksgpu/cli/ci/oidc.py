"""`aksgpu ci oidc ENV`: the Entra ID identities the GitHub Actions workflows of one environment sign
in with (OIDC federation, no stored secret), as az commands to print or to run with --apply.

Two identities per environment, each an app registration with its service principal:
- plan (`aksgpu-<repo>-<env>-plan`): pull-request previews and the scheduled drift check. Read-only
  on Azure (Reader, plus Azure Kubernetes Service Cluster User Role because the program reads the
  cluster's user kubeconfig, a POST that Reader does not allow), read-only on the state blobs, and
  Key Vault Crypto User on the secrets key.
- deploy (`aksgpu-<repo>-<env>-deploy`): `pulumi up` in the GitHub environment ENV. Contributor, and
  Role Based Access Control Administrator limited by an ABAC condition to the roles the program
  assigns (PROGRAM_ASSIGNED_ROLES) and to service principals and groups; read-write on the state
  blobs; Key Vault Crypto User on the key.
Azure roles sit on the environment's resource group, or on the subscription when the spec creates
that group (resourceGroup.create: true): the group does not exist before the first deploy, and
creating it is a subscription-level write. The state roles sit on the blob container, the Key
Vault role on the one key.

Assumption, from Pulumi's DIY backend (pkg/backend/diy/backend.go): a preview takes no lock and
writes no history or checkpoint, so the plan identity can preview with read-only blob access,
provided the stack exists (the first `pulumi up`, by the deploy identity, creates it) and the
backend's .pulumi/meta.yaml exists (written on first use).

The repository variables the workflows read are named in GITHUB_VARIABLES. Only typer and the
standard library are imported at module level, so `aksgpu --help` stays fast.

Exit codes: 0 done; 1 an az command failed, or the environment's spec has errors; 2 bad input,
a local state backend, or az missing for --apply.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import textwrap
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qs, urlsplit

import typer

from aksgpu.cli.workflow.commands import (
    CONTAINER_NAME,
    EXIT_FAILED,
    KEY_NAME,
    KEY_VAULT_NAME,
    STORAGE_ACCOUNT_NAME,
    command_errors,
    fail,
    say,
    shell_command,
    shell_command_lines,
    substitute,
)

GITHUB_OIDC_ISSUER = "https://token.actions.githubusercontent.com"
GITHUB_OIDC_AUDIENCE = "api://AzureADTokenExchange"

# The repository variables (GitHub → Settings → Secrets and variables → Actions → Variables) the
# workflows read. {ENV} is variable_suffix(environment): the name upper-cased, every character
# other than A-Z and 0-9 turned into "_" ("eu-prod" → EU_PROD). Tenant and subscription are one
# each for the repository; each environment has its own plan and deploy client IDs. A client ID
# is not a secret: what lets a job use an identity is the federated credential's subject.
GITHUB_VARIABLES: dict[str, str] = {
    "tenant": "AZURE_TENANT_ID",
    "subscription": "AZURE_SUBSCRIPTION_ID",
    "plan_client": "AZURE_CLIENT_ID_PLAN_{ENV}",
    "deploy_client": "AZURE_CLIENT_ID_DEPLOY_{ENV}",
}

# Every role the Pulumi program assigns (aksgpu/components/access.py, cluster.py, registry.py), and to
# whom: the deploy identity may assign these and no others. The tests keep this list in step with
# components/. All of them, not only those this environment's spec uses today, so turning on Azure
# RBAC or a registry later does not break deploys; each is narrower than what the deploy identity
# already holds in its scope.
PROGRAM_ASSIGNED_ROLES = (
    "AcrPull",  # the kubelet identity, on the registry
    "Managed Identity Operator",  # the control-plane identity, on the kubelet identity
    "Network Contributor",  # the control-plane identity, on each subnet aksgpu creates or is given
    "Azure Kubernetes Service Cluster User Role",  # admin and team groups, on the cluster
    "Azure Kubernetes Service RBAC Cluster Admin",  # admin groups, on the cluster (Azure RBAC)
    "Azure Kubernetes Service RBAC Writer",  # team groups, on their namespace (Azure RBAC)
    "Azure Kubernetes Service RBAC Reader",  # read-only groups, on the cluster (Azure RBAC)
)
PROGRAM_ASSIGNEE_TYPES = ("ServicePrincipal", "Group")  # managed identities are ServicePrincipal

ROLE_CONDITION_VARIABLE = "ROLE_CONDITION"
RETRY_SECONDS = 15

_OWNER = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}$")
_REPO_NAME = re.compile(r"^[A-Za-z0-9._-]{1,100}$")
_BRANCH = re.compile(r"^(?!-)(?!.*\.\.)(?!.*//)(?!.*@\{)[A-Za-z0-9._/-]{1,200}(?<![./])$")
_GUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_RESOURCE_ID = re.compile(r"^/subscriptions/(?P<subscription>[^/]+)/resourceGroups/(?P<group>[^/]+)/",
                          re.IGNORECASE)


# --- names -----------------------------------------------------------------------------------


def variable_suffix(environment: str) -> str:
    """The environment's part of a GitHub variable name: "eu-prod" → "EU_PROD"."""
    return re.sub(r"[^A-Z0-9]", "_", environment.upper())


def plan_client_variable(environment: str) -> str:
    """The repository variable with the plan identity's client ID, e.g. AZURE_CLIENT_ID_PLAN_DEV."""
    return GITHUB_VARIABLES["plan_client"].format(ENV=variable_suffix(environment))


def deploy_client_variable(environment: str) -> str:
    """The repository variable with the deploy identity's client ID, e.g. AZURE_CLIENT_ID_DEPLOY_DEV."""
    return GITHUB_VARIABLES["deploy_client"].format(ENV=variable_suffix(environment))


def _credential_name(text: str) -> str:
    # Federated credential names: up to 120 letters, digits, '-' and '_'.
    return re.sub(r"[^A-Za-z0-9_-]", "-", text)[:120]


def input_problems(repo: str, branch: str, subscription: str | None) -> list[str]:
    """Each option that cannot be right, with the rule and a fix."""
    problems = []
    owner, _, name = repo.partition("/")
    if repo.startswith(("https://", "http://", "git@")) or "github.com" in repo:
        problems.append(f'--repo "{repo}" must be OWNER/REPO, not a URL. Fix: e.g. --repo contoso/gpu-infra.')
    elif not (_OWNER.fullmatch(owner) and _REPO_NAME.fullmatch(name) and name not in (".", "..")
              and not name.endswith(".git")):
        problems.append(f'--repo "{repo}" must be OWNER/REPO as GitHub spells it: the owner 1-39 letters, digits '
                        "and single hyphens, the repository 1-100 letters, digits, '.', '-' or '_' (no .git). The "
                        "OIDC subject is compared exactly. Fix: e.g. --repo contoso/gpu-infra.")
    if branch.startswith("refs/") or not _BRANCH.fullmatch(branch):
        problems.append(f'--branch "{branch}" must be a branch name (letters, digits, ".", "_", "-", "/"; not a '
                        "ref like refs/heads/main). Fix: e.g. --branch main.")
    if subscription is not None and not _GUID.fullmatch(subscription):
        problems.append(f'--subscription "{subscription}" must be a subscription ID (a GUID; '
                        "`az account list --output table` lists yours). Fix: e.g. "
                        "--subscription 00000000-0000-0000-0000-000000000000, or leave it out to use the Azure "
                        "CLI's current subscription.")
    return problems


# --- what the environment says ---------------------------------------------------------------


@dataclass(frozen=True)
class ExternalResource:
    """A resource the spec points at outside the identities' Azure scope: nothing is granted there."""

    field: str
    resource_id: str
    needs: str


@dataclass(frozen=True)
class OidcSettings:
    environment: str
    repo: str
    """OWNER/REPO exactly as GitHub spells it (OIDC subjects are compared case-sensitively)."""
    resource_group: str
    creates_resource_group: bool
    branch: str = "main"
    subscription: str | None = None
    """None: the Azure CLI's current subscription (az account show)."""
    backend_url: str = ""
    storage_account: str | None = None
    """None: Pulumi Cloud holds the state (no storage roles)."""
    container: str | None = None
    key_vault: str | None = None
    """None: the secrets provider is not an Azure Key Vault key (no Key Vault role)."""
    key: str | None = None
    external: tuple[ExternalResource, ...] = field(default_factory=tuple)
    kubernetes_authorization: str | None = None
    """How the in-cluster layer is authorized: azure-rbac or kubernetes-rbac; None: no in-cluster layer."""

    @property
    def repo_name(self) -> str:
        return self.repo.partition("/")[2]

    @property
    def azure_scope(self) -> str:
        """Where the Azure roles go: the resource group, or the subscription when the spec creates it."""
        subscription = "/subscriptions/${SUBSCRIPTION_ID}"
        return subscription if self.creates_resource_group else f"{subscription}/resourceGroups/{self.resource_group}"

    @property
    def azure_scope_text(self) -> str:
        if self.creates_resource_group:
            return (f"the subscription (the spec creates resource group {self.resource_group}, which does not exist "
                    "before the first deploy)")
        return f"resource group {self.resource_group}"

    @property
    def state_scope(self) -> str | None:
        if self.storage_account is None:
            return None
        return f"${{STATE_ACCOUNT_ID}}/blobServices/default/containers/{self.container}"

    @property
    def key_scope(self) -> str | None:
        return None if self.key_vault is None else f"${{VAULT_ID}}/keys/{self.key}"

    @property
    def subjects(self) -> dict[str, str]:
        """The OIDC subjects GitHub puts in the token of each kind of job."""
        return {
            "pull_request": f"repo:{self.repo}:pull_request",
            "branch": f"repo:{self.repo}:ref:refs/heads/{self.branch}",
            "environment": f"repo:{self.repo}:environment:{self.environment}",
        }


def parse_azblob_backend(url: str) -> tuple[str, str]:
    """(container, storage account) of azblob://<container>[/<path>]?storage_account=<account>."""
    from aksgpu.cli.project.stackfile import UserError

    parts = urlsplit(url)
    container = parts.netloc
    accounts = parse_qs(parts.query).get("storage_account", [])
    if not accounts:
        raise UserError(f'backend "{url}" does not name its storage account, and CI has only the URL to go on. Fix: '
                        "write it as azblob://<container>?storage_account=<account> in stacks/environments.yaml.")
    account = accounts[0]
    if not CONTAINER_NAME.fullmatch(container) or not STORAGE_ACCOUNT_NAME.fullmatch(account):
        raise UserError(f'backend "{url}" is not azblob://<container>?storage_account=<account> with a valid '
                        "container (3-63 lowercase letters, digits and single hyphens) and account (3-24 lowercase "
                        "letters and digits). Fix: correct it in stacks/environments.yaml.")
    return container, account


def parse_key_vault_provider(url: str) -> tuple[str, str]:
    """(vault, key) of azurekeyvault://<vault>.vault.azure.net/keys/<key>[/<version>]."""
    from aksgpu.cli.project.stackfile import UserError

    parts = urlsplit(url)
    vault, _, suffix = parts.netloc.partition(".")
    path = [part for part in parts.path.split("/") if part]
    if not (suffix.startswith("vault.") and KEY_VAULT_NAME.fullmatch(vault) and len(path) in (2, 3)
            and path[0] == "keys" and KEY_NAME.fullmatch(path[1])):
        raise UserError(f'secrets provider "{url}" is not azurekeyvault://<vault>.vault.azure.net/keys/<key>. Fix: '
                        "correct it in stacks/environments.yaml (`aksgpu backend bootstrap` prints the right line).")
    return vault, path[1]


def external_resources(spec: Any, subscription: str | None) -> tuple[ExternalResource, ...]:
    """Existing resources the spec names that lie outside the identities' Azure scope."""
    group = spec.resource_group.name
    found: list[tuple[str, str, str]] = []
    if spec.registry.mode == "existing" and spec.registry.id:
        found.append(("registry.id", spec.registry.id,
                      ("Role Based Access Control Administrator with the same condition (the program gives the "
                       "kubelet identity AcrPull there)")))
    if spec.network.vnet.mode == "existing":
        for index, subnet in enumerate(spec.network.vnet.subnets):
            if subnet.id:
                found.append((f"network.vnet.subnets[{index}].id", subnet.id,
                              ("Network Contributor (AKS joins the nodes to the subnet) and Role Based Access "
                               "Control Administrator with the same condition (the program gives the control-plane "
                               "identity Network Contributor there)")))
    workspace = spec.monitoring.log_analytics
    if workspace.mode == "existing" and workspace.workspace_id:
        found.append(("monitoring.logAnalytics.workspaceId", workspace.workspace_id,
                      "Log Analytics Contributor (AKS sends Container Insights and control-plane logs there)"))
    zone = spec.control_plane.api_server.private_dns_zone
    if zone.startswith("/"):
        found.append(("controlPlane.apiServer.privateDnsZone", zone,
                      ("Reader; and the control-plane identity needs Private DNS Zone Contributor there, which the "
                       "program does not assign")))
    outside = []
    for where, resource_id, needs in found:
        match = _RESOURCE_ID.match(resource_id)
        other_subscription = bool(match and subscription and match["subscription"].lower() != subscription.lower())
        other_group = bool(match and match["group"].lower() != group.lower())
        if other_subscription or (other_group and not spec.resource_group.create):
            outside.append(ExternalResource(where, resource_id, needs))
    return tuple(outside)


def oidc_settings(environment: str, repo: str, branch: str, subscription: str | None,
                  project_dir: Path | None = None) -> OidcSettings:
    """The settings for one environment of stacks/environments.yaml: its state backend, secrets
    provider and effective spec. UserError for a backend CI cannot use; SpecError for a bad spec."""
    from aksgpu.cli.environments.file import load_environments
    from aksgpu.cli.environments.render import effective_environment, stack_path
    from aksgpu.cli.project.stackfile import UserError, load_yaml
    from aksgpu.cli.workflow.commands import recorded_secrets_provider, resolve_target

    environments = load_environments(project_dir)
    settings = environments.get(environment)
    clashes = [name for name in environments.names
               if name != environment and variable_suffix(name) == variable_suffix(environment)]
    if clashes:
        raise UserError(f"environments {environment} and {clashes[0]} would share the GitHub variable "
                        f"{plan_client_variable(environment)} (variable names are upper case, with '_' for other "
                        "characters). Fix: rename one of them in stacks/environments.yaml.")
    path = stack_path(environments, environment)
    document = load_yaml(path) if path.is_file() else None
    target = resolve_target(environment, environments.project_dir, path, env={},
                            environment_backend=settings.backend,
                            environment_secrets_provider=settings.secrets_provider,
                            recorded_provider=recorded_secrets_provider(document if isinstance(document, dict) else {}))
    if target.backend_kind == "file":
        raise UserError(f"environment {environment} keeps its Pulumi state in a local folder ({target.backend_url}, "
                        f"{target.backend_source}), and a CI runner loses its disk when the job ends: CI needs a "
                        "shared backend. Fix: create one with `aksgpu backend bootstrap`, put the backend: and "
                        "secretsProvider: lines it prints under defaults: (or this environment) in "
                        f"stacks/environments.yaml, and run `aksgpu ci oidc {environment}` again.")
    container = account = vault = key = None
    if target.backend_kind == "azblob":
        container, account = parse_azblob_backend(target.backend_url)
    if target.secrets_provider and target.secrets_provider.startswith("azurekeyvault://"):
        vault, key = parse_key_vault_provider(target.secrets_provider)
    spec = effective_environment(environments, environment).spec
    return OidcSettings(
        environment=environment, repo=repo, branch=branch, subscription=subscription,
        resource_group=spec.resource_group.name, creates_resource_group=spec.resource_group.create,
        backend_url=target.backend_url, storage_account=account, container=container, key_vault=vault, key=key,
        external=external_resources(spec, subscription),
        kubernetes_authorization=spec.access.authorization if spec.in_cluster.enabled else None,
    )


# --- the identities --------------------------------------------------------------------------


@dataclass(frozen=True)
class Grant:
    role: str
    scope: str
    """May hold ${SUBSCRIPTION_ID}, ${STATE_ACCOUNT_ID} or ${VAULT_ID}."""
    why: str
    conditional: bool = False
    """Limited by the ABAC condition in ${ROLE_CONDITION}."""


@dataclass(frozen=True)
class Identity:
    kind: str
    """plan or deploy."""
    display_name: str
    shell_prefix: str
    """PLAN or DEPLOY: the script keeps the IDs in ${PLAN_APP_ID}, ${PLAN_SP_ID}."""
    github_variable: str
    purpose: str
    credentials: tuple[tuple[str, str], ...]
    """(name, subject) of each federated credential."""
    grants: tuple[Grant, ...]


def identities(settings: OidcSettings) -> list[Identity]:
    s = settings
    subjects = s.subjects
    where = s.azure_scope_text
    plan_grants = [
        Grant("Reader", s.azure_scope, f"read every resource in {where}, for the preview and the drift check"),
        Grant("Azure Kubernetes Service Cluster User Role", s.azure_scope,
              "the program reads the cluster's user kubeconfig (listClusterUserCredential, an action Reader does "
              "not include) during a preview"),
    ]
    deploy_grants = [
        Grant("Contributor", s.azure_scope, f"create, change and delete the environment's resources in {where}"),
        Grant("Role Based Access Control Administrator", s.azure_scope,
              "the program assigns roles; the condition allows only " + ", ".join(PROGRAM_ASSIGNED_ROLES)
              + " and only to service principals and groups", conditional=True),
    ]
    if s.kubernetes_authorization == "azure-rbac":
        # The in-cluster layer goes through the Kubernetes API, where Azure RBAC decides.
        plan_grants.append(Grant("Azure Kubernetes Service RBAC Reader", s.azure_scope,
                                 "read the cluster's Kubernetes objects a preview compares with"))
        deploy_grants.append(Grant("Azure Kubernetes Service RBAC Cluster Admin", s.azure_scope,
                                   "apply the in-cluster layer (namespaces, cluster-wide RBAC, DaemonSets, Helm "
                                   "releases) through the Kubernetes API"))
    if s.state_scope:
        plan_grants.append(Grant("Storage Blob Data Reader", s.state_scope,
                                 f"read the state in container {s.container} (a preview takes no lock)"))
        deploy_grants.append(Grant("Storage Blob Data Contributor", s.state_scope,
                                   f"read and write the state, locks and history in container {s.container}"))
    if s.key_scope:
        for grants in (plan_grants, deploy_grants):
            grants.append(Grant("Key Vault Crypto User", s.key_scope,
                                f"decrypt (and encrypt) the stack's secrets with key {s.key} in vault {s.key_vault}"))
    return [
        Identity("plan", f"aksgpu-{s.repo_name}-{s.environment}-plan", "PLAN", plan_client_variable(s.environment),
                 f"pull-request previews and the drift check on {s.branch}: read-only",
                 ((_credential_name("github-pull-request"), subjects["pull_request"]),
                  (_credential_name(f"github-branch-{s.branch}"), subjects["branch"])),
                 tuple(plan_grants)),
        Identity("deploy", f"aksgpu-{s.repo_name}-{s.environment}-deploy", "DEPLOY",
                 deploy_client_variable(s.environment),
                 f"deploys in the GitHub environment {s.environment} (behind its required reviewers)",
                 ((_credential_name(f"github-environment-{s.environment}"), subjects["environment"]),),
                 tuple(deploy_grants)),
    ]


def role_condition(role_ids: list[str], principal_types: tuple[str, ...] = PROGRAM_ASSIGNEE_TYPES) -> str:
    """An ABAC condition (version 2.0) for Role Based Access Control Administrator: create and delete
    only assignments of these role definitions, to principals of these types (Azure's "constrain
    roles and principal types" template)."""
    roles = ", ".join(role_ids)
    types = ", ".join(f"'{kind}'" for kind in principal_types)
    clauses = []
    for action, source in (("write", "Request"), ("delete", "Resource")):
        clauses.append(
            f"((!(ActionMatches{{'Microsoft.Authorization/roleAssignments/{action}'}})) OR "
            f"(@{source}[Microsoft.Authorization/roleAssignments:RoleDefinitionId] ForAnyOfAnyValues:GuidEquals "
            f"{{{roles}}} AND @{source}[Microsoft.Authorization/roleAssignments:PrincipalType] "
            f"ForAnyOfAnyValues:StringEqualsIgnoreCase {{{types}}}))")
    return " AND ".join(clauses)


def program_role_condition() -> str:
    from aksgpu.components import data

    return role_condition([data.role_id(role) for role in PROGRAM_ASSIGNED_ROLES])


# --- the steps -------------------------------------------------------------------------------


@dataclass(frozen=True)
class OidcStep:
    description: str
    argv: list[str]
    capture: str | None = None
    """A shell variable this step's stdout sets (it must not be empty); later steps use ${NAME}."""
    lookup: list[str] | None = None
    """Runs first; when it prints something the thing exists: the step is skipped, and with
    `capture` that output is the value. Lookups are list commands that print nothing when absent."""
    missing: str | None = None
    """The error when a capture comes back empty."""
    retries: int = 0
    """Extra attempts RETRY_SECONDS apart: a new app or service principal takes a moment to replicate."""


def _tsv(query: str) -> list[str]:
    return ["--query", query, "--output", "tsv"]


def oidc_steps(settings: OidcSettings) -> list[OidcStep]:
    """The az commands, in order; each looks before it creates, so a second run changes nothing."""
    from aksgpu.components import data

    s = settings
    on_subscription = ["--subscription", s.subscription] if s.subscription else []
    steps = [
        OidcStep("the subscription the environment lives in" + ("" if s.subscription else
                                                               " (the Azure CLI's current one: `az account set` "
                                                               "chooses another)"),
                 ["az", "account", "show", *on_subscription, *_tsv("id")], capture="SUBSCRIPTION_ID"),
        OidcStep("its Entra ID tenant",
                 ["az", "account", "show", *on_subscription, *_tsv("tenantId")], capture="TENANT_ID"),
    ]
    if not s.creates_resource_group:
        steps.append(OidcStep(f"resource group {s.resource_group} exists (resourceGroup.create: false: aksgpu deploys "
                              "into it, so the identities get their Azure roles there)",
                              ["az", "group", "show", "--name", s.resource_group,
                               "--subscription", "${SUBSCRIPTION_ID}", "--output", "none"]))
    if s.storage_account:
        steps.append(OidcStep(
            f"the state storage account {s.storage_account} (in the Azure CLI's current subscription)",
            ["az", "storage", "account", "list", *_tsv(f"[?name=='{s.storage_account}'].id | [0]")],
            capture="STATE_ACCOUNT_ID",
            missing=f"storage account {s.storage_account} (the backend {s.backend_url}) is not in the Azure CLI's "
                    "current subscription. Fix: `az account set --subscription <the one that holds it>`, or create it "
                    "with `aksgpu backend bootstrap`."))
    if s.key_vault:
        steps.append(OidcStep(
            f"the key vault {s.key_vault} (in the Azure CLI's current subscription)",
            ["az", "keyvault", "list", *_tsv(f"[?name=='{s.key_vault}'].id | [0]")],
            capture="VAULT_ID",
            missing=f"key vault {s.key_vault} (the secrets provider) is not in the Azure CLI's current subscription. "
                    "Fix: `az account set --subscription <the one that holds it>`, or create it with "
                    "`aksgpu backend bootstrap`."))
    for identity in identities(s):
        app, sp = f"{identity.shell_prefix}_APP_ID", f"{identity.shell_prefix}_SP_ID"
        steps.append(OidcStep(
            f"app registration {identity.display_name}: {identity.purpose}",
            ["az", "ad", "app", "create", "--display-name", identity.display_name,
             "--sign-in-audience", "AzureADMyOrg", *_tsv("appId")],
            capture=app,
            lookup=["az", "ad", "app", "list", "--display-name", identity.display_name, *_tsv("[0].appId")]))
        steps.append(OidcStep(
            "its service principal (what roles are assigned to)",
            ["az", "ad", "sp", "create", "--id", f"${{{app}}}", *_tsv("id")],
            capture=sp,
            lookup=["az", "ad", "sp", "list", "--filter", f"appId eq '${{{app}}}'", *_tsv("[0].id")],
            retries=4))
        for name, subject in identity.credentials:
            parameters = {"name": name, "issuer": GITHUB_OIDC_ISSUER, "subject": subject,
                          "audiences": [GITHUB_OIDC_AUDIENCE], "description": f"aksgpu: {subject}"}
            steps.append(OidcStep(
                f"federated credential {name}: GitHub tokens with subject {subject}",
                ["az", "ad", "app", "federated-credential", "create", "--id", f"${{{app}}}",
                 "--parameters", json.dumps(parameters), "--output", "none"],
                lookup=["az", "ad", "app", "federated-credential", "list", "--id", f"${{{app}}}",
                        *_tsv(f"[?name=='{name}' || subject=='{subject}'].name | [0]")],
                retries=4))
        for grant in identity.grants:
            role_id = data.role_id(grant.role)
            condition = (["--condition", f"${{{ROLE_CONDITION_VARIABLE}}}", "--condition-version", "2.0"]
                         if grant.conditional else [])
            steps.append(OidcStep(
                f"{grant.role} for {identity.kind}" + (" (with the condition above)" if grant.conditional else "")
                + f": {grant.why}",
                ["az", "role", "assignment", "create", "--role", role_id, "--assignee-object-id", f"${{{sp}}}",
                 "--assignee-principal-type", "ServicePrincipal", "--scope", grant.scope, *condition,
                 "--description", f"aksgpu ci oidc: {grant.role}", "--output", "none"],
                lookup=["az", "role", "assignment", "list", "--scope", grant.scope, "--role", role_id,
                        *_tsv(f"[?principalId=='${{{sp}}}'].id | [0]")],
                retries=4))
    return steps


def script_constants() -> dict[str, str]:
    """Values the steps use that are known before anything runs."""
    return {ROLE_CONDITION_VARIABLE: program_role_condition()}


def github_commands(settings: OidcSettings) -> list[str]:
    """The gh commands that set the repository variables and create the GitHub environment (with
    ${TENANT_ID}, ${SUBSCRIPTION_ID}, ${PLAN_APP_ID} and ${DEPLOY_APP_ID} for the values)."""
    s = settings
    repo = ["--repo", s.repo]
    environment_path = f"repos/{s.repo}/environments/{s.environment}"
    variables = [(GITHUB_VARIABLES["tenant"], "${TENANT_ID}"),
                 (GITHUB_VARIABLES["subscription"], "${SUBSCRIPTION_ID}"),
                 (plan_client_variable(s.environment), "${PLAN_APP_ID}"),
                 (deploy_client_variable(s.environment), "${DEPLOY_APP_ID}")]
    lines = [shell_command(["gh", "variable", "set", name, *repo, "--body", value]) for name, value in variables]
    lines += [
        "# The GitHub environment the deploy job runs in, deployable only from " + s.branch + ":",
        shell_command(["gh", "api", "--method", "PUT", environment_path,
                        "-F", "deployment_branch_policy[protected_branches]=false",
                        "-F", "deployment_branch_policy[custom_branch_policies]=true"]),
        shell_command(["gh", "api", "--method", "POST", f"{environment_path}/deployment-branch-policies",
                        "-f", f"name={s.branch}", "-f", "type=branch"]),
        "# Required reviewers: Settings > Environments > " + s.environment + " > Required reviewers, or send them",
        "# in the same PUT (a list of objects, so as JSON on stdin rather than --field), with the IDs that",
        "# gh api users/LOGIN --jq .id  or  gh api orgs/ORG/teams/SLUG --jq .id  print:",
        (f"#   echo '{{\"reviewers\": [{{\"type\": \"User\", \"id\": 1234567}}], \"deployment_branch_policy\": "
         f"{{\"protected_branches\": false, \"custom_branch_policies\": true}}}}' | "
         f"gh api --method PUT {environment_path} --input -"),
    ]
    return lines


def github_variables(settings: OidcSettings, values: Mapping[str, str] | None = None) -> dict[str, str]:
    """Repository variable → value (or its ${PLACEHOLDER} when `values` does not have it yet)."""
    placeholders = {GITHUB_VARIABLES["tenant"]: "TENANT_ID", GITHUB_VARIABLES["subscription"]: "SUBSCRIPTION_ID",
                    plan_client_variable(settings.environment): "PLAN_APP_ID",
                    deploy_client_variable(settings.environment): "DEPLOY_APP_ID"}
    values = values or {}
    return {name: values.get(shell, f"${{{shell}}}") for name, shell in placeholders.items()}


def notes(settings: OidcSettings) -> list[str]:
    s = settings
    found = []
    if s.creates_resource_group:
        found.append(f"the Azure roles are on the whole subscription because the spec creates resource group "
                     f"{s.resource_group} (resourceGroup.create: true). To keep them to the group: create it once "
                     f"(az group create), set resourceGroup.create: false for {s.environment}, and run this again "
                     "(then remove the subscription-wide assignments with `az role assignment delete`).")
    if s.storage_account is None:
        found.append(f"the state is in {s.backend_url}: the workflows need a PULUMI_ACCESS_TOKEN secret; no storage "
                     "roles are assigned.")
    if s.key_vault is None:
        found.append("the secrets provider is not an Azure Key Vault key: no Key Vault role is assigned.")
    if s.kubernetes_authorization == "kubernetes-rbac":
        found.append(f"{s.environment} uses Kubernetes RBAC, so no Azure role lets the deploy identity apply the "
                     "in-cluster layer: add its service principal (${DEPLOY_SP_ID}) to one of the groups in "
                     "access.aad.adminGroupObjectIds (az ad group member add --group GROUP --member-id "
                     "${DEPLOY_SP_ID}), or switch to access.authorization: azure-rbac. Previews need no rights in "
                     "the cluster: the Kubernetes provider falls back to a client-side diff when the API refuses "
                     "a dry run.")
    for resource in s.external:
        found.append(f"{resource.field} points outside the identities' Azure scope ({resource.resource_id}); "
                     f"nothing is granted there. The deploy identity needs {resource.needs}.")
    return found


# --- printing and running --------------------------------------------------------------------


def _comment(text: str, width: int = 110) -> list[str]:
    return textwrap.wrap(text, width, initial_indent="# ", subsequent_indent="# ", break_on_hyphens=False,
                         break_long_words=False)


def oidc_script(settings: OidcSettings) -> str:
    """A bash script of the steps, runnable as printed (after `az login`)."""
    s = settings
    who = identities(s)
    lines = ["#!/usr/bin/env bash"]
    lines += _comment(f"aksgpu ci oidc {s.environment}: the Entra ID identities GitHub Actions in {s.repo} signs in "
                      f"with for environment {s.environment} (OIDC federation: no client secret anywhere).")
    lines += [f"#   {identity.display_name}: {identity.purpose}" for identity in who]
    lines += _comment("Run it after `az login`, as someone who may register applications in Entra ID and assign "
                      f"roles on {s.azure_scope_text}" + (", the state container" if s.storage_account else "")
                      + (" and the secrets key" if s.key_vault else "")
                      + " (Owner, or User Access Administrator or Role Based Access Control Administrator there). "
                      "Each step looks first and creates only what is missing, so running it again is safe; an "
                      "existing role assignment is left as it is, condition included (delete it to change that).")
    lines += ["set -euo pipefail", ""]
    for note in notes(s):
        lines += _comment(f"Note: {note}")
    lines += [""]
    lines += _comment("Role Based Access Control Administrator for deploy may assign (and remove) only the roles the "
                      "program assigns, " + ", ".join(PROGRAM_ASSIGNED_ROLES) + ", and only to service principals "
                      "and groups:")
    lines += [f"{ROLE_CONDITION_VARIABLE}=\"$(cat <<'CONDITION'", program_role_condition(), "CONDITION", ")\"", ""]
    steps = oidc_steps(s)
    for number, step in enumerate(steps, start=1):
        lines += _comment(f"{number}. {step.description}")
        if step.retries:
            lines.append("#    (a new app or service principal takes a moment to replicate: if this says it does not "
                         "exist, wait a minute and run the script again)")
        command = shell_command(step.argv)
        if step.lookup and step.capture:
            lines.append(f'{step.capture}="$({shell_command(step.lookup)})"')
            lines.append(f'if [ -z "${{{step.capture}}}" ]; then')
            lines.append(f'  {step.capture}="$({command})"')
            lines.append("fi")
        elif step.lookup:
            lines.append(f'if [ -z "$({shell_command(step.lookup)})" ]; then')
            lines += shell_command_lines(step.argv, indent="  ")
            lines.append("fi")
        elif step.capture:
            lines.append(f'{step.capture}="$({command})"')
        else:
            lines += shell_command_lines(step.argv)
        if step.capture:
            message = step.missing or f"step {number} printed nothing"
            lines.append(f'[ -n "${{{step.capture}}}" ] || {{ echo {shlex.quote("error: " + message)} >&2; exit 1; }}')
        lines.append("")
    lines.append(f"# {len(steps) + 1}. What the workflows read: repository variables and the GitHub environment "
                 f"{s.environment}.")
    lines.append("#    Run the printed commands where gh is signed in to GitHub, or set the same in the repository's "
                 "settings.")
    lines.append("cat <<EOF")
    lines += github_commands(s)
    lines.append("EOF")
    return "\n".join(lines) + "\n"


def oidc_document(settings: OidcSettings) -> dict[str, Any]:
    """The settings, identities and steps as data (--json)."""
    from aksgpu.components import data

    s = settings
    return {
        "environment": s.environment,
        "repository": s.repo,
        "branch": s.branch,
        "azureScope": s.azure_scope,
        "identities": [{
            "kind": identity.kind, "displayName": identity.display_name, "purpose": identity.purpose,
            "githubVariable": identity.github_variable,
            "federatedCredentials": [{"name": name, "subject": subject, "issuer": GITHUB_OIDC_ISSUER,
                                      "audiences": [GITHUB_OIDC_AUDIENCE]} for name, subject in identity.credentials],
            "roles": [{"role": grant.role, "roleId": data.role_id(grant.role), "scope": grant.scope,
                       "condition": f"${{{ROLE_CONDITION_VARIABLE}}}" if grant.conditional else None,
                       "why": grant.why} for grant in identity.grants],
        } for identity in identities(s)],
        "variables": script_constants(),
        "steps": [{"description": step.description, "command": step.argv, "capture": step.capture,
                   "lookup": step.lookup} for step in oidc_steps(s)],
        "github": {"variables": github_variables(s), "environment": s.environment, "commands": github_commands(s)},
        "notes": notes(s),
    }


def run_oidc(settings: OidcSettings, *, run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run,
             sleep: Callable[[float], None] = time.sleep) -> dict[str, str]:
    """Runs the steps one by one and returns the values they captured; a failed step is a UserError
    naming the command and Azure's message."""
    from aksgpu.cli.project.stackfile import UserError

    values = script_constants()
    steps = oidc_steps(settings)

    def failure(number: int, argv: list[str], result: subprocess.CompletedProcess[str]) -> UserError:
        message = (result.stderr or result.stdout or "").strip().splitlines()
        return UserError(f"step {number} failed: {shell_command(argv)}\n  {message[-1] if message else ''}\n"
                         f"Fix: correct the cause and run the same `aksgpu ci oidc {settings.environment} ... --apply` "
                         "again: what exists already is left as it is.")

    def attempts(argv: list[str], retries: int) -> subprocess.CompletedProcess[str]:
        for attempt in range(retries + 1):
            result = run(argv, capture_output=True, text=True)
            if result.returncode == 0 or attempt == retries:
                return result
            say(f"    not there yet (Entra ID and role assignments take a moment to replicate); trying again in "
                 f"{RETRY_SECONDS} s", "dim")
            sleep(RETRY_SECONDS)
        raise AssertionError("unreachable")

    for number, step in enumerate(steps, start=1):
        say(f"[{number}/{len(steps)}] {step.description}")
        if step.lookup:
            lookup = substitute(step.lookup, values)
            found = attempts(lookup, step.retries)
            if found.returncode != 0:
                raise failure(number, lookup, found)
            if found.stdout.strip():
                say("    exists already: left as it is", "dim")
                if step.capture:
                    values[step.capture] = found.stdout.strip()
                continue
        argv = substitute(step.argv, values)
        result = attempts(argv, step.retries)
        if result.returncode != 0:
            raise failure(number, argv, result)
        if step.capture:
            value = result.stdout.strip()
            if not value:
                raise UserError(step.missing or f"step {number} failed: {shell_command(argv)} printed nothing.")
            values[step.capture] = value
    return values


# --- the command -----------------------------------------------------------------------------


def oidc(
    environment: Annotated[str, typer.Argument(help="An environment of stacks/environments.yaml.")],
    repo: Annotated[str, typer.Option(
        "--repo", help="The GitHub repository, OWNER/REPO exactly as GitHub spells it.")],
    branch: Annotated[str, typer.Option(
        "--branch", help="The default branch: the drift check runs there, deploys only from there.")] = "main",
    subscription: Annotated[str | None, typer.Option(
        "--subscription", help="Subscription ID of the environment. Default: the Azure CLI's current one.")] = None,
    apply: Annotated[bool, typer.Option(
        "--apply", help="Run the commands with the Azure CLI instead of printing them.")] = False,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print the identities and steps as JSON (with --apply: the values to set).")] = False,
) -> None:
    """Print (or --apply) the az commands that create the environment's CI identities: app
    registrations with GitHub OIDC federated credentials and least-privilege role assignments.

    plan (pull-request previews, drift check): read-only. deploy (GitHub environment ENV): can
    change the environment's resources and assign only the roles the program assigns. Ends with
    the repository variables and GitHub environment the workflows expect. Exit codes: 0 done,
    1 an az command failed or the spec has errors, 2 bad input, a local state backend, or az missing.
    """
    from aksgpu.cli.project.stackfile import UserError
    from aksgpu.components.spec import SpecError

    with command_errors("ci oidc", []):
        problems = input_problems(repo, branch, subscription)
        if problems:
            raise UserError(problems[0] if len(problems) == 1 else "\n".join(
                [f"{len(problems)} options are wrong:", *(f"  - {problem}" for problem in problems)]))
        try:
            settings = oidc_settings(environment, repo, branch, subscription)
        except SpecError as error:
            typer.echo(str(error), err=True)
            raise typer.Exit(EXIT_FAILED) from None
        if not apply:
            if as_json:
                typer.echo(json.dumps(oidc_document(settings), indent=2))
            else:
                typer.echo(oidc_script(settings), nl=False)
            return
        if shutil.which("az") is None:
            raise UserError("--apply runs the Azure CLI, and az is not on PATH. Fix: install it "
                            "(https://learn.microsoft.com/cli/azure/install-azure-cli) and run `az login`, or drop "
                            "--apply to print the commands and run them elsewhere (Azure Cloud Shell has az).")
        try:
            values = run_oidc(settings)
        except UserError as error:
            fail(str(error), EXIT_FAILED)
            return
        for note in notes(settings):
            say(f"note: {note}", "yellow")
        commands = [substitute([line], values)[0] for line in github_commands(settings)]
        if as_json:
            typer.echo(json.dumps({"github": {"variables": github_variables(settings, values),
                                              "environment": settings.environment, "commands": commands}}, indent=2))
            return
        say("Identities ready. Set what the workflows read (where gh is signed in to GitHub):", "bold")
        for line in commands:
            typer.echo(line)


def register(ci_app: typer.Typer) -> None:
    """Adds `oidc` to the `aksgpu ci` group."""
    ci_app.command("oidc")(oidc)
