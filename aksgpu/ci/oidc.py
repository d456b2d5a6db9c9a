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

This module makes the identities, the az steps that create them, and the script, document and
GitHub commands that show them; oidc_settings.py resolves the environment they are made for, and
ci/commands.py holds the command. Standard library only at import.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import textwrap
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aksgpu.ci.oidc_settings import (
    GITHUB_OIDC_AUDIENCE,
    GITHUB_OIDC_ISSUER,
    GITHUB_VARIABLES,
    OidcSettings,
    deploy_client_variable,
    plan_client_variable,
)
from aksgpu.errors import UserError
from aksgpu.workflow.az_steps import AzStep, AzStepFailed, run_steps, shell_command, step_script_lines

# Every role the Pulumi program assigns (aksgpu/components/), and to whom: the deploy identity may
# assign these and no others (the tests keep this list in step with components/). All of them, not
# only those this environment uses today, so turning on Azure RBAC, KMS, disk encryption or a
# registry later does not break deploys; each is narrower than what the deploy identity holds.
PROGRAM_ASSIGNED_ROLES = (
    "AcrPull",  # the kubelet identity, on the registry
    "Managed Identity Operator",  # the control-plane identity, on the kubelet identity
    "Network Contributor",  # the control-plane identity, on each subnet aksgpu creates or is given
    "Azure Kubernetes Service Cluster User Role",  # admin and team groups, on the cluster
    "Azure Kubernetes Service RBAC Cluster Admin",  # admin groups, on the cluster (Azure RBAC)
    "Azure Kubernetes Service RBAC Writer",  # team groups, on their namespace (Azure RBAC)
    "Azure Kubernetes Service RBAC Reader",  # read-only groups, on the cluster (Azure RBAC)
    "Key Vault Crypto User",  # the control-plane identity, on the KMS vault (encrypt and decrypt with its key)
    "Key Vault Contributor",  # the control-plane identity, on a private KMS vault (AKS adds its private link)
    "Key Vault Crypto Service Encryption User",  # a disk encryption set's identity, on its key
    "Reader",  # the control-plane identity, on the disk encryption set it puts on OS disks
)
PROGRAM_ASSIGNEE_TYPES = ("ServicePrincipal", "Group")  # managed identities are ServicePrincipal

ROLE_CONDITION_VARIABLE = "ROLE_CONDITION"
RETRY_SECONDS = 15  # between attempts while a new app or service principal replicates


def _credential_name(text: str) -> str:
    # Federated credential names: up to 120 letters, digits, '-' and '_'.
    return re.sub(r"[^A-Za-z0-9_-]", "-", text)[:120]


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
    from aksgpu import catalog

    return role_condition([catalog.role_id(role) for role in PROGRAM_ASSIGNED_ROLES])


# --- the steps -------------------------------------------------------------------------------


def _tsv(query: str) -> list[str]:
    return ["--query", query, "--output", "tsv"]


def oidc_steps(settings: OidcSettings) -> list[AzStep]:
    """The az commands, in order; each looks before it creates, so a second run changes nothing."""
    from aksgpu import catalog

    s = settings
    on_subscription = ["--subscription", s.subscription] if s.subscription else []
    steps = [
        AzStep("the subscription the environment lives in" + ("" if s.subscription else
                                                               " (the Azure CLI's current one: `az account set` "
                                                               "chooses another)"),
                 ["az", "account", "show", *on_subscription, *_tsv("id")], capture="SUBSCRIPTION_ID"),
        AzStep("its Entra ID tenant",
                 ["az", "account", "show", *on_subscription, *_tsv("tenantId")], capture="TENANT_ID"),
    ]
    if not s.creates_resource_group:
        steps.append(AzStep(f"resource group {s.resource_group} exists (resourceGroup.create: false: aksgpu deploys "
                              "into it, so the identities get their Azure roles there)",
                              ["az", "group", "show", "--name", s.resource_group,
                               "--subscription", "${SUBSCRIPTION_ID}", "--output", "none"]))
    if s.storage_account:
        steps.append(AzStep(
            f"the state storage account {s.storage_account} (in the Azure CLI's current subscription)",
            ["az", "storage", "account", "list", *_tsv(f"[?name=='{s.storage_account}'].id | [0]")],
            capture="STATE_ACCOUNT_ID",
            missing=f"storage account {s.storage_account} (the backend {s.backend_url}) is not in the Azure CLI's "
                    "current subscription. Fix: `az account set --subscription <the one that holds it>`, or create it "
                    "with `aksgpu backend bootstrap`."))
    if s.key_vault:
        steps.append(AzStep(
            f"the key vault {s.key_vault} (in the Azure CLI's current subscription)",
            ["az", "keyvault", "list", *_tsv(f"[?name=='{s.key_vault}'].id | [0]")],
            capture="VAULT_ID",
            missing=f"key vault {s.key_vault} (the secrets provider) is not in the Azure CLI's current subscription. "
                    "Fix: `az account set --subscription <the one that holds it>`, or create it with "
                    "`aksgpu backend bootstrap`."))
    for identity in identities(s):
        app, sp = f"{identity.shell_prefix}_APP_ID", f"{identity.shell_prefix}_SP_ID"
        steps.append(AzStep(
            f"app registration {identity.display_name}: {identity.purpose}",
            ["az", "ad", "app", "create", "--display-name", identity.display_name,
             "--sign-in-audience", "AzureADMyOrg", *_tsv("appId")],
            capture=app,
            lookup=["az", "ad", "app", "list", "--display-name", identity.display_name, *_tsv("[0].appId")]))
        steps.append(AzStep(
            "its service principal (what roles are assigned to)",
            ["az", "ad", "sp", "create", "--id", f"${{{app}}}", *_tsv("id")],
            capture=sp,
            lookup=["az", "ad", "sp", "list", "--filter", f"appId eq '${{{app}}}'", *_tsv("[0].id")],
            retries=4))
        for name, subject in identity.credentials:
            parameters = {"name": name, "issuer": GITHUB_OIDC_ISSUER, "subject": subject,
                          "audiences": [GITHUB_OIDC_AUDIENCE], "description": f"aksgpu: {subject}"}
            steps.append(AzStep(
                f"federated credential {name}: GitHub tokens with subject {subject}",
                ["az", "ad", "app", "federated-credential", "create", "--id", f"${{{app}}}",
                 "--parameters", json.dumps(parameters), "--output", "none"],
                lookup=["az", "ad", "app", "federated-credential", "list", "--id", f"${{{app}}}",
                        *_tsv(f"[?name=='{name}' || subject=='{subject}'].name | [0]")],
                retries=4))
        for grant in identity.grants:
            role_id = catalog.role_id(grant.role)
            condition = (["--condition", f"${{{ROLE_CONDITION_VARIABLE}}}", "--condition-version", "2.0"]
                         if grant.conditional else [])
            steps.append(AzStep(
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
    if s.scope_note:
        found.append(s.scope_note)
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
        lines += step_script_lines(step)
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
    from aksgpu import catalog

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
            "roles": [{"role": grant.role, "roleId": catalog.role_id(grant.role), "scope": grant.scope,
                       "condition": f"${{{ROLE_CONDITION_VARIABLE}}}" if grant.conditional else None,
                       "why": grant.why} for grant in identity.grants],
        } for identity in identities(s)],
        "variables": script_constants(),
        "steps": [{"description": step.description, "command": step.argv, "capture": step.capture,
                   "lookup": step.lookup} for step in oidc_steps(s)],
        "github": {"variables": github_variables(s), "environment": s.environment, "commands": github_commands(s)},
        "notes": notes(s),
    }


def run_oidc(settings: OidcSettings, *, say: Callable[[str, str | None], None],
             run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run,
             sleep: Callable[[float], None] = time.sleep) -> dict[str, str]:
    """Runs the steps one by one and returns the values they captured; a failed step is a UserError
    naming the command and Azure's message."""
    try:
        return run_steps(oidc_steps(settings), values=script_constants(), say=say, run=run, sleep=sleep,
                         retry_seconds=RETRY_SECONDS,
                         retry_note="not there yet (Entra ID and role assignments take a moment to replicate)",
                         rerun_fix=f"correct the cause and run the same `aksgpu ci oidc {settings.environment} ... "
                                   "--apply` again: what exists already is left as it is.")
    except AzStepFailed as error:
        raise UserError(str(error)) from None
