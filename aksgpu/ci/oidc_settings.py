"""`aksgpu ci oidc ENV`, its inputs: the options checked (repository, branch, subscription) and one
environment of stacks/environments.yaml resolved into the settings the identities are made from
(state backend, secrets key, resource group, resources outside it the program touches), and the
names of the GitHub repository variables the workflows read. Standard library only at import.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from aksgpu.errors import Problem, UserError
from aksgpu.workflow.az_steps import CONTAINER_NAME, KEY_NAME, STORAGE_ACCOUNT_NAME, key_vault_name_rule

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


def input_problems(repo: str, branch: str, subscription: str | None) -> list[Problem]:
    """Each option that cannot be right, with the rule and a fix."""
    problems = []
    owner, _, name = repo.partition("/")
    if repo.startswith(("https://", "http://", "git@")) or "github.com" in repo:
        problems.append(Problem("--repo", repo, "must be OWNER/REPO, not a URL", "e.g. --repo contoso/gpu-infra"))
    elif not (_OWNER.fullmatch(owner) and _REPO_NAME.fullmatch(name) and name not in (".", "..")
              and not name.endswith(".git")):
        problems.append(Problem("--repo", repo, "must be OWNER/REPO as GitHub spells it: the owner 1-39 letters, "
                                "digits and single hyphens, the repository 1-100 letters, digits, '.', '-' or '_' "
                                "(no .git); the OIDC subject is compared exactly", "e.g. --repo contoso/gpu-infra"))
    if branch.startswith("refs/") or not _BRANCH.fullmatch(branch):
        problems.append(Problem("--branch", branch, 'must be a branch name (letters, digits, ".", "_", "-", "/"; '
                                "not a ref like refs/heads/main)", "e.g. --branch main"))
    if subscription is not None and not _GUID.fullmatch(subscription):
        problems.append(Problem("--subscription", subscription, "must be a subscription ID (a GUID; "
                                "`az account list --output table` lists yours)", "e.g. --subscription "
                                "00000000-0000-0000-0000-000000000000, or leave it out to use the Azure CLI's "
                                "current subscription"))
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
    fleet_groups: tuple[str, ...] = ()
    """A fleet environment: the resource groups of its shared stack and members (roles on the subscription)."""

    @property
    def repo_name(self) -> str:
        return self.repo.partition("/")[2]

    @property
    def azure_scope(self) -> str:
        """Where the Azure roles go: the resource group, or the subscription when the spec creates it."""
        subscription = "/subscriptions/${SUBSCRIPTION_ID}"
        return subscription if self.creates_resource_group else f"{subscription}/resourceGroups/{self.resource_group}"

    @property
    def scope_note(self) -> str | None:
        """Why the Azure roles are on the whole subscription, when they are."""
        if self.fleet_groups:
            return (f"the Azure roles are on the whole subscription: fleet {self.environment}'s stacks create and use "
                    f"resource groups {', '.join(self.fleet_groups)} (the shared stack's always creates its own).")
        if self.creates_resource_group:
            return (f"the Azure roles are on the whole subscription because the spec creates resource group "
                    f"{self.resource_group} (resourceGroup.create: true). To keep them to the group: create it once "
                    f"(az group create), set resourceGroup.create: false for {self.environment}, and run this again "
                    "(then remove the subscription-wide assignments with `az role assignment delete`).")
        return None

    @property
    def azure_scope_text(self) -> str:
        if self.fleet_groups:
            return f"the subscription (the fleet's stacks create resource groups {', '.join(self.fleet_groups)})"
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

    parts = urlsplit(url)
    container = parts.netloc
    accounts = parse_qs(parts.query).get("storage_account", [])
    if not accounts:
        raise UserError(problems=[Problem("backend", url, "does not name its storage account, and CI has only the "
                                          "URL to go on", "write it as azblob://<container>?storage_account=<account>",
                                          source="stacks/environments.yaml")])
    account = accounts[0]
    if not CONTAINER_NAME.fullmatch(container) or not STORAGE_ACCOUNT_NAME.fullmatch(account):
        raise UserError(problems=[Problem("backend", url, "must be azblob://<container>?storage_account=<account> "
                                          "with a valid container (3-63 lowercase letters, digits and single "
                                          "hyphens) and account (3-24 lowercase letters and digits)",
                                          "correct it in stacks/environments.yaml", source="stacks/environments.yaml")])
    return container, account


def parse_key_vault_provider(url: str) -> tuple[str, str]:
    """(vault, key) of azurekeyvault://<vault>.vault.azure.net/keys/<key>[/<version>]."""

    parts = urlsplit(url)
    vault, _, suffix = parts.netloc.partition(".")
    path = [part for part in parts.path.split("/") if part]
    if not (suffix.startswith("vault.") and key_vault_name_rule().fullmatch(vault) and len(path) in (2, 3)
            and path[0] == "keys" and KEY_NAME.fullmatch(path[1])):
        raise UserError(problems=[Problem("secretsProvider", url, "must be azurekeyvault://<vault>.vault.azure.net/"
                                          "keys/<key>", "correct it in stacks/environments.yaml (`aksgpu backend "
                                          "bootstrap` prints the right line)", source="stacks/environments.yaml")])
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
    from aksgpu.environments.file import load_environments
    from aksgpu.environments.fleet import effective_fleet
    from aksgpu.environments.render import effective_environment, stack_path
    from aksgpu.project.stackfile import load_yaml
    from aksgpu.workflow.target import recorded_secrets_provider, resolve_target

    environments = load_environments(project_dir)
    settings = environments.get(environment)
    clashes = [name for name in environments.names
               if name != environment and variable_suffix(name) == variable_suffix(environment)]
    if clashes:
        raise UserError(problems=[Problem(
            f"environments.{environment}", environment, f"it and environment {clashes[0]} would share the GitHub "
            f"variable {plan_client_variable(environment)} (variable names are upper case, with '_' for other "
            "characters)", "rename one of them", source="stacks/environments.yaml")])
    path = stack_path(environments, environment)
    document = load_yaml(path) if path.is_file() else None
    target = resolve_target(environment, environments.project_dir, path, env={},
                            environment_backend=settings.backend,
                            environment_secrets_provider=settings.secrets_provider,
                            recorded_provider=recorded_secrets_provider(document if isinstance(document, dict) else {}))
    if target.backend_kind == "file":
        raise UserError(problems=[Problem(
            "backend", target.backend_url, f"environment {environment} keeps its Pulumi state in a local folder, and "
            "a CI runner loses its disk when the job ends: CI needs a shared backend",
            "create one with `aksgpu backend bootstrap`, put the backend: and secretsProvider: lines it prints under "
            f"defaults: (or this environment) in stacks/environments.yaml, and run `aksgpu ci oidc {environment}` "
            "again", source=f"from {target.backend_source}")])
    container = account = vault = key = None
    if target.backend_kind == "azblob":
        container, account = parse_azblob_backend(target.backend_url)
    if target.secrets_provider and target.secrets_provider.startswith("azurekeyvault://"):
        vault, key = parse_key_vault_provider(target.secrets_provider)
    if settings.fleet is not None:
        # A fleet: the shared stack's resource group (always created, so the identities act on the
        # subscription) and every member's external resources and in-cluster authorization.
        fleet = effective_fleet(environments, environment)
        specs = [member.spec for member in fleet.members]
        group, creates = fleet.spec.resource_group, True
    else:
        specs = [effective_environment(environments, environment).spec]
        group, creates = specs[0].resource_group.name, specs[0].resource_group.create
    external = tuple(dict.fromkeys(resource for spec in specs for resource in external_resources(spec, subscription)))
    authorizations = {spec.access.authorization for spec in specs if spec.in_cluster.enabled}
    return OidcSettings(
        environment=environment, repo=repo, branch=branch, subscription=subscription,
        resource_group=group, creates_resource_group=creates,
        backend_url=target.backend_url, storage_account=account, container=container, key_vault=vault, key=key,
        external=external,
        # Azure RBAC on any member needs its roles; Kubernetes RBAC alone needs none.
        kubernetes_authorization=("azure-rbac" if "azure-rbac" in authorizations
                                  else next(iter(authorizations), None)),
        fleet_groups=(group, *(spec.resource_group.name for spec in specs)) if settings.fleet is not None else (),
    )
