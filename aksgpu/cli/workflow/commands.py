"""The workflow commands: preview, up, destroy, refresh, outputs, kubeconfig and `backend bootstrap`.

Each command is the order of its steps; the steps live in runner.py (the Automation API),
target.py (backend, secrets, prerequisites), kubeconfig.py and backend.py, which import only typer
and the standard library at module level: `aksgpu --help` must stay fast, so pulumi.automation,
yaml, rich and the spec are imported when a command runs.

Exit codes: 0 done; 1 the operation failed (engine error, spec errors, declined); 2 bad input or a
missing prerequisite (Pulumi CLI, Azure credentials, passphrase); 3 `preview --expect-no-changes`
found changes; 130 interrupted.
"""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path
from typing import Annotated

import typer

from aksgpu.cli.arguments import CONTEXT_SETTINGS, StackArg
from aksgpu.cli.console import fail, say
from aksgpu.errors import Problem, UserError
from aksgpu.errors import EXIT_CHANGES, EXIT_FAILED
from aksgpu.stack_config import CLUSTER_KEY
from aksgpu.workflow.az_steps import AZ_MISSING
from aksgpu.workflow.backend import (
    STORAGE_SKUS,
    BootstrapSettings,
    bootstrap_problems,
    bootstrap_script,
    bootstrap_steps,
    environments_snippet,
    run_bootstrap,
)
from aksgpu.workflow.kubeconfig import LoginMode, kubeconfig_for_login, write_kubeconfig
from aksgpu.cli.workflow.runner import (
    EngineOutput,
    command_errors,
    describe_changes,
    has_changes,
    is_protected,
    open_stack,
    outputs_document,
    outputs_text,
    policy_options,
    policy_packs,
    prepare,
    print_header,
    protected_in_state,
    report_update,
    require_confirmable,
    require_ready,
    require_rendered,
    summarize_changes,
    validate_spec,
)
from aksgpu.workflow.target import DEFAULT_STATE_DIR, PULUMI_CLOUD_URL, Target

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
    "--policy-pack", metavar="FOLDER",
    help="A Pulumi policy pack folder to apply (repeatable); a mandatory violation fails the run.")]


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
        stack_file, target = prepare(stack, backend, secrets_provider, box)
        spec = validate_spec(stack_file)
        require_rendered("preview", stack_file)
        policy_packs(policy_pack)  # a folder that is not a pack is bad input, before anything runs
        require_ready("preview", stack_file, target, needs_azure=True)
        print_header("preview", target)
        engine = EngineOutput(to_stderr=as_json)
        with policy_options(policy_pack, spec) as policies:
            result = open_stack(target, create=True).preview(diff=diff, refresh=refresh, **policies,
                                                             **engine.options())
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
    member: Annotated[list[str] | None, typer.Option(
        "--member", metavar="NAME", help="With a fleet: deploy only this member after the shared stack (repeatable; "
                                         "a member's name or stack).")] = None,
    parallel: Annotated[int, typer.Option(
        "--parallel", min=1, max=64, metavar="N", help="With a fleet: how many members deploy at once.")] = 4,
    members: Annotated[bool, typer.Option(
        "--members/--no-members", help="With a fleet: deploy its members after the shared stack (--no-members: "
                                      "the shared stack alone, as CI's per-stack jobs do).")] = True,
) -> None:
    """Create or update the stack's resources in Azure (pulumi up through the Automation API).

    Shows the preview and asks before changing anything, unless --yes. A fleet environment's stack
    deploys the fleet: its shared stack first, then its members in parallel (--parallel, --member),
    then its upgrades stack (not with --member: deploy STACK-upgrades once every member has joined);
    a member's stack deploys that member alone. Exit codes: 0 done, 1 the update or the spec failed
    or you declined, 2 bad input or a missing prerequisite.
    """
    box: list[Target] = []
    with command_errors("up", box):
        stack_file, target = prepare(stack, backend, secrets_provider, box)
        if stack_file.is_fleet:
            from aksgpu.cli.workflow.fleet import up_whole_fleet

            up_whole_fleet(stack_file, member=member, parallel=parallel, yes=yes, diff=diff,
                      refresh=refresh, only_shared=not members,
                      policy_pack=policy_pack, as_json=as_json, backend=backend, secrets_provider=secrets_provider)
            return
        if member:
            raise UserError(problems=[Problem("--member", member, f"picks members of a fleet, and "
                                              f"{stack_file.path.name} is not a fleet's shared stack",
                                              "drop --member, or pass the fleet environment's name")])
        spec = validate_spec(stack_file)
        require_rendered("up", stack_file)
        policy_packs(policy_pack)  # a folder that is not a pack is bad input, before anything runs
        if not yes:
            require_confirmable("up", target.stack)
        require_ready("up", stack_file, target, needs_azure=True)
        print_header("up", target)
        engine = EngineOutput(to_stderr=as_json)
        pulumi_stack = open_stack(target, create=True)
        with policy_options(policy_pack, spec) as policies:
            if not yes:
                preview_result = pulumi_stack.preview(diff=diff, refresh=refresh, **policies, **engine.options())
                say(f"Preview of {target.stack}: {describe_changes(summarize_changes(preview_result.change_summary))}.",
                    "bold")
                if not typer.confirm(f"Apply these changes to stack {target.stack}?", default=False, err=True):
                    say("Cancelled: nothing was changed.")
                    raise typer.Exit(EXIT_FAILED)
            result = pulumi_stack.up(diff=diff, refresh=refresh, **policies, **engine.options())
        report_update("up", target, result.summary, as_json,
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
    box: list[Target] = []
    with command_errors("destroy", box):
        stack_file, target = prepare(stack, backend, secrets_provider, box)
        name = target.stack
        from aksgpu.cli.workflow.fleet import refuse_a_fleet_with_members

        refuse_a_fleet_with_members(stack_file)
        if is_protected(stack_file):
            raise UserError(problems=[Problem(
                "protect", True, f"stack {name} is protected, so Pulumi refuses to delete the cluster, registry, "
                "workspaces and resource group; a destroy would delete everything else first and then fail halfway",
                f"if you mean to destroy it: set protect: false in the {name} environment (its overrides in "
                f"stacks/environments.yaml), run `aksgpu render {name}`, apply that with `aksgpu up {name}` (it only "
                f"lifts the protection in Pulumi's state), then run `aksgpu destroy {name}`",
                source=f"{CLUSTER_KEY} in {target.stack_path.relative_to(target.project_dir)}")])
        if not yes:
            require_confirmable("destroy", name)
        require_ready("destroy", stack_file, target, needs_azure=True)
        print_header("destroy", target)
        engine = EngineOutput(to_stderr=as_json)
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
        report_update("destroy", target, result.summary, as_json)


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
        stack_file, target = prepare(stack, backend, secrets_provider, box)
        require_ready("refresh", stack_file, target, needs_azure=True)
        print_header("refresh", target)
        engine = EngineOutput(to_stderr=as_json)
        result = open_stack(target, create=False).refresh(**engine.options())
        report_update("refresh", target, result.summary, as_json)


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
        stack_file, target = prepare(stack, backend, secrets_provider, box)
        require_ready("outputs", stack_file, target, needs_azure=False)
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
    box: list[Target] = []
    with command_errors("stack output", box):
        stack_file, target = prepare(stack, backend, secrets_provider, box)
        if stack_file.is_fleet or stack_file.is_fleet_upgrades:
            raise UserError(problems=[Problem(
                "STACK argument", stack, f"{stack_file.path.name} is a fleet's "
                f"{'shared' if stack_file.is_fleet else 'upgrades'} stack, which has no cluster",
                "name a member's stack (`aksgpu kubeconfig FLEET-MEMBER`)")])
        require_ready("kubeconfig", stack_file, target, needs_azure=False)
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
    settings = BootstrapSettings(resource_group, location, storage_account, container, key_vault, key, assignee, sku,
                                 retention_days)
    with command_errors("bootstrap", []):
        problems = bootstrap_problems(settings)
        if problems:
            raise UserError(problems=problems, source="the command line")
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
            raise UserError(AZ_MISSING)
        try:
            run_bootstrap(settings, say=say)
        except UserError as error:
            fail(error, EXIT_FAILED)
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
