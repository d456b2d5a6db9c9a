"""`aksgpu ci`: rendered GitHub workflows and Azure Pipelines (schema-valid, golden, pinned,
least privilege), which environments a change touches, the plan summary, and the Azure DevOps
pull-request comment."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from aksgpu.cli.app import app
from aksgpu.ci.comment import post_or_update
from aksgpu.ci.pipelines import changed_environments, ci_settings, render_azure_devops, render_github
from aksgpu.errors import UserError
from aksgpu.plan.summary import MARKER, EnvironmentResult, summary_markdown

runner = CliRunner()
GOLDEN = Path(__file__).resolve().parent / "golden" / "ci"
TOOLS = Path(sys.executable).parent
SHARED_BACKEND = ("defaults:\n  backend: azblob://pulumi-state?storage_account=stpulumistate01\n"
                  "  secretsProvider: azurekeyvault://kv-pulumi-state.vault.azure.net/keys/pulumi-secrets\n")


@pytest.fixture
def shared(project: Path) -> Path:
    """The example project with a team backend (azblob + Key Vault) for every environment."""
    path = project / "stacks" / "environments.yaml"
    path.write_text(path.read_text().replace("defaults:\n", SHARED_BACKEND, 1))
    return project


def _check_jsonschema(schema: str, files: list[Path]) -> subprocess.CompletedProcess[str]:
    # The Azure Pipelines schema uses regular expressions only Python's engine accepts.
    return subprocess.run([str(TOOLS / "check-jsonschema"), "--regex-variant", "python", "--builtin-schema", schema,
                           *map(str, files)], capture_output=True, text=True)


def _write(root: Path, files: dict[str, str]) -> list[Path]:
    paths = []
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        paths.append(path)
    return paths


def _golden(name: str, text: str) -> None:
    """Compare with tests/golden/ci/<name>; AKSGPU_UPDATE_GOLDEN=1 rewrites it (review the diff)."""
    path = GOLDEN / name
    if os.environ.get("AKSGPU_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.read_text() == text, f"{name} differs from its golden file (AKSGPU_UPDATE_GOLDEN=1 to accept)"


def test_github_workflows_validate_and_match_the_golden_files(shared: Path, tmp_path: Path) -> None:
    files = render_github(ci_settings(shared))
    assert sorted(files) == [f".github/workflows/aksgpu-{name}.yml"
                             for name in ("checks", "comment", "deploy", "drift", "preview")]
    result = _check_jsonschema("vendor.github-workflows", _write(tmp_path / "out", files))
    assert result.returncode == 0, result.stdout + result.stderr
    for relative, text in files.items():
        _golden("github/" + Path(relative).name, text)


def test_azure_pipeline_validates_and_matches_the_golden_file(shared: Path, tmp_path: Path) -> None:
    files = render_azure_devops(ci_settings(shared))
    result = _check_jsonschema("vendor.azure-pipelines", _write(tmp_path / "out", files))
    assert result.returncode == 0, result.stdout + result.stderr
    _golden("azure-devops/aksgpu.yml", files[".azure-pipelines/aksgpu.yml"])


def test_a_schema_check_that_can_fail_does(tmp_path: Path) -> None:
    """The oracle itself: a workflow with a misspelt key is rejected."""
    bad = tmp_path / "bad.yml"
    bad.write_text("on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    stepz: []\n")
    assert _check_jsonschema("vendor.github-workflows", [bad]).returncode != 0


def _workflows(project: Path) -> dict[str, dict[str, Any]]:
    return {Path(k).stem: yaml.safe_load(v) for k, v in render_github(ci_settings(project)).items()}


def test_every_action_is_pinned_to_a_commit(shared: Path) -> None:
    for relative, text in render_github(ci_settings(shared)).items():
        uses = re.findall(r"uses: (\S+)@(\S+)(.*)", text)
        assert uses, relative
        for action, ref, comment in uses:
            assert re.fullmatch(r"[0-9a-f]{40}", ref), f"{relative}: {action}@{ref} is not pinned to a commit"
            assert re.fullmatch(r" # v\d+\.\d+\.\d+", comment), f"{relative}: {action} has no tag comment"


def test_jobs_that_reach_a_cluster_install_kubelogin_after_signing_in(shared: Path) -> None:
    """The in-cluster layer's provider runs kubelogin; every job that previews, deploys or checks
    drift installs it after azure/login and before aksgpu runs."""
    checked = 0
    for name, workflow in _workflows(shared).items():
        for job_name, job in workflow["jobs"].items():
            steps = job.get("steps") or []
            login = [i for i, step in enumerate(steps) if str(step.get("uses", "")).startswith("Azure/login@")]
            if not login:
                continue
            kubelogin = [i for i, step in enumerate(steps)
                         if "kubelogin-linux-amd64.zip" in str(step.get("run", ""))]
            runs = [i for i, step in enumerate(steps)
                    if re.search(r"aksgpu (preview|up|refresh)", str(step.get("run", "")))]
            assert kubelogin and runs and login[0] < kubelogin[0] < runs[0], f"{name}/{job_name}"
            checked += 1
    assert checked >= 3


def test_permissions_are_least_privilege(shared: Path) -> None:
    workflows = _workflows(shared)
    for name, workflow in workflows.items():
        assert workflow["permissions"] == {"contents": "read"}, name
        assert "pull_request_target" not in workflow[True], "never run fork code with a write token"
    checks = workflows["aksgpu-checks"]["jobs"]["offline"]
    assert "permissions" not in checks, "the fork-safe checks get only the read-only default"
    assert workflows["aksgpu-comment"]["jobs"]["comment"]["permissions"] == {"actions": "read",
                                                                          "pull-requests": "write"}
    for job_name, job in workflows["aksgpu-deploy"]["jobs"].items():
        if job_name.startswith("deploy-"):
            assert job["permissions"] == {"contents": "read", "id-token": "write"}
    preview = workflows["aksgpu-preview"]["jobs"]
    assert preview["changes"]["if"] == "github.event.pull_request.head.repo.full_name == github.repository"


def test_deploys_run_in_order_behind_environments_with_production_last(shared: Path) -> None:
    jobs = _workflows(shared)["aksgpu-deploy"]["jobs"]
    assert [name for name in jobs if name.startswith("deploy-")] == ["deploy-dev", "deploy-prod"]
    assert jobs["deploy-prod"]["needs"] == ["changes", "deploy-dev"]
    assert jobs["deploy-prod"]["environment"] == "prod" and jobs["deploy-dev"]["environment"] == "dev"
    assert jobs["deploy-prod"]["concurrency"] == {"group": "aksgpu-stack-prod", "cancel-in-progress": False}
    assert "aksgpu up prod --yes" in jobs["deploy-prod"]["steps"][-1]["run"]
    up_env = jobs["deploy-prod"]["steps"][-1]["env"]
    assert up_env["ARM_USE_OIDC"] == "true" and set(up_env) >= {"ARM_CLIENT_ID", "ARM_TENANT_ID",
                                                                 "ARM_SUBSCRIPTION_ID"}


def test_protected_environments_deploy_last_whatever_their_order(shared: Path) -> None:
    path = shared / "stacks" / "environments.yaml"
    text = path.read_text()
    dev_start, prod_start = text.index("  dev:\n"), text.index("  prod:\n")
    path.write_text(text[:dev_start] + text[prod_start:] + "\n" + text[dev_start:prod_start])
    settings = ci_settings(shared)
    assert [env.name for env in settings.environments] == ["dev", "prod"]


def test_drift_check_opens_an_issue_only_on_drift(shared: Path) -> None:
    workflow = _workflows(shared)["aksgpu-drift"]
    assert "schedule" in workflow[True]
    job = workflow["jobs"]["drift-prod"]
    assert job["permissions"] == {"contents": "read", "id-token": "write", "issues": "write"}
    preview, report = job["steps"][-2], job["steps"][-1]
    assert "--refresh --expect-no-changes" in preview["run"]
    assert report["if"] == "steps.drift.outputs.code == '3'"


def test_without_a_shared_backend_only_the_offline_workflows_are_rendered(project: Path) -> None:
    assert sorted(render_github(ci_settings(project))) == [".github/workflows/aksgpu-checks.yml",
                                                          ".github/workflows/aksgpu-comment.yml"]
    result = runner.invoke(app, ["ci", "github"])
    assert result.exit_code == 0, result.output
    assert "note: dev, prod use the local state backend" in result.output


def test_a_policy_pack_in_the_project_is_applied_to_previews(shared: Path) -> None:
    assert "--policy-pack" not in render_github(ci_settings(shared))[".github/workflows/aksgpu-preview.yml"]
    (shared / "policy").mkdir()
    (shared / "policy" / "PulumiPolicy.yaml").write_text("runtime: python\n")
    preview = render_github(ci_settings(shared))[".github/workflows/aksgpu-preview.yml"]
    assert "aksgpu preview prod --diff --policy-pack policy" in preview


def test_ci_github_writes_then_keeps_hand_edits_unless_forced(shared: Path) -> None:
    first = runner.invoke(app, ["ci", "github"])
    assert first.exit_code == 0 and ".github/workflows/aksgpu-deploy.yml: created" in first.output
    assert runner.invoke(app, ["ci", "github", "--check"]).exit_code == 0
    assert ".github/workflows/aksgpu-deploy.yml: unchanged" in runner.invoke(app, ["ci", "github"]).output
    deploy = shared / ".github" / "workflows" / "aksgpu-deploy.yml"
    edited = deploy.read_text().replace("timeout-minutes: 120", "timeout-minutes: 240")
    deploy.write_text(edited)
    check = runner.invoke(app, ["ci", "github", "--check"])
    assert check.exit_code == 1 and "-    timeout-minutes: 240" in check.output
    refused = runner.invoke(app, ["ci", "github"])
    assert refused.exit_code == 2 and "was edited by hand" in refused.output and "--force" in refused.output
    assert deploy.read_text() == edited
    forced = runner.invoke(app, ["ci", "github", "--force"])
    assert forced.exit_code == 0 and "kept as .github/workflows/aksgpu-deploy.yml.bak" in forced.output
    assert (deploy.parent / "aksgpu-deploy.yml.bak").read_text() == edited


def test_ci_azure_devops_writes_the_pipeline(shared: Path) -> None:
    result = runner.invoke(app, ["ci", "azure-devops"])
    assert result.exit_code == 0 and ".azure-pipelines/aksgpu.yml: created" in result.output
    pipeline = yaml.safe_load((shared / ".azure-pipelines" / "aksgpu.yml").read_text())
    stages = [stage["stage"] for stage in pipeline["stages"]]
    assert stages == ["checks", "preview", "deploy_dev", "deploy_prod", "drift"]
    deploy_prod = pipeline["stages"][3]
    assert deploy_prod["dependsOn"] == ["checks", "deploy_dev"]
    assert deploy_prod["jobs"][0]["environment"] == "prod"


# --- which environments a change touches ---------------------------------------------------


def test_a_stack_file_change_touches_its_environment_and_a_program_change_all() -> None:
    names = ["dev", "staging", "prod"]
    assert changed_environments(["stacks/Pulumi.prod.yaml", "README.md"], names) == ["prod"]
    assert changed_environments(["stacks/environments.yaml"], names) == []
    assert changed_environments(["aksgpu/components/node_pools.py"], names) == names
    assert changed_environments(["pyproject.toml"], names) == names
    assert changed_environments(["componentsX/notes.md"], names) == []


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
                               "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}).stdout


def test_ci_changed_reads_git_history(project: Path) -> None:
    _git(project, "init", "-q", "-b", "main")
    _git(project, "add", "-A")
    _git(project, "commit", "-q", "-m", "base")
    base = _git(project, "rev-parse", "HEAD").strip()
    stack = project / "stacks" / "Pulumi.prod.yaml"
    stack.write_text(stack.read_text() + "\n")
    _git(project, "commit", "-q", "-am", "prod only")
    result = runner.invoke(app, ["ci", "changed", "--base", base, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == ["prod"]
    (project / "__main__.py").write_text((project / "__main__.py").read_text() + "\n")
    _git(project, "commit", "-q", "-am", "program")
    assert json.loads(runner.invoke(app, ["ci", "changed", "--base", base, "--json"]).output) == ["dev", "prod"]
    only = runner.invoke(app, ["ci", "changed", "--base", base, "--only", "prod", "--json"])
    assert json.loads(only.output) == ["prod"]
    unknown = runner.invoke(app, ["ci", "changed", "--base", base, "--only", "qa"])
    assert unknown.exit_code == 2 and "unknown environments: qa" in unknown.output
    bad = runner.invoke(app, ["ci", "changed", "--base", "no-such-commit"])
    assert bad.exit_code == 2 and "fetch-depth: 0" in bad.output and "Traceback" not in bad.output


# --- the plan summary -----------------------------------------------------------------------


@pytest.mark.slow
def test_the_summary_is_deterministic_and_lists_every_environment(project: Path) -> None:
    first = runner.invoke(app, ["ci", "summary", "--commit", "abc123"])
    assert first.exit_code == 0, first.output
    assert first.output == runner.invoke(app, ["ci", "summary", "--commit", "abc123"]).output
    text = first.output
    assert text.startswith(MARKER + "\n")
    assert "| `prod` | ⚠️ 2 warnings | 147 | 9 | 162 | 248 |" in text
    assert "| `t4spot` | User | Standard_NC4as_T4_v3 | 1 | 1 | 0-2 | spot |" in text
    assert "Commit `abc123`" in text


def test_the_summary_reports_an_environment_with_errors_and_exits_1(project: Path) -> None:
    stack = project / "stacks" / "Pulumi.dev.yaml"
    stack.write_text(stack.read_text().replace("tier: Free", "tier: Gold"))
    result = runner.invoke(app, ["ci", "summary"])
    assert result.exit_code == 1
    assert "| `dev` | ❌ invalid |" in result.output and 'controlPlane.tier = "Gold"' in result.output
    assert "edited by hand" in result.output or "hand-edited" in result.output
    assert "| `prod` | ⚠️ 2 warnings |" in result.output, "the other environments are still planned"


def test_new_kinds_of_finding_slot_in_as_sections() -> None:
    from aksgpu.plan import summary

    result = EnvironmentResult("dev", "stacks/Pulumi.dev.yaml", None, errors=["bad | value <b>"])
    text = summary_markdown([result])
    assert "- bad \\| value &lt;b&gt;" in text, "user text cannot break the table or inject HTML"
    original = summary.SECTION_BUILDERS
    try:
        summary.SECTION_BUILDERS = (*original, lambda r: summary.Section("Cost", ["- $0 (example)"]))
        assert "**Cost**\n\n- $0 (example)" in summary_markdown([result])
    finally:
        summary.SECTION_BUILDERS = original


# --- the Azure DevOps pull-request comment --------------------------------------------------

ADO_ENV = {"SYSTEM_COLLECTIONURI": "https://dev.azure.com/org/", "SYSTEM_TEAMPROJECTID": "p1",
           "BUILD_REPOSITORY_ID": "r1", "SYSTEM_PULLREQUEST_PULLREQUESTID": "7", "SYSTEM_ACCESSTOKEN": "t"}
THREADS = "https://dev.azure.com/org/p1/_apis/git/repositories/r1/pullRequests/7/threads"


def _fake(threads: list[dict[str, Any]]):  # noqa: ANN202 - a recording stand-in for the REST call
    calls: list[tuple[str, str, Any]] = []

    def send(method: str, url: str, payload: Any) -> dict[str, Any]:
        calls.append((method, url, payload))
        return {"value": threads} if method == "GET" else {}

    return send, calls


def test_the_azure_devops_comment_is_created_once_then_updated() -> None:
    body = MARKER + "\n## aksgpu plan\n"
    send, calls = _fake([{"id": 3, "comments": [{"id": 1, "content": "someone else's comment"}]}])
    assert post_or_update(body, ADO_ENV, send) == "created"
    assert calls[-1][0] == "POST" and calls[-1][1] == f"{THREADS}?api-version=7.1"
    assert calls[-1][2]["comments"][0]["content"] == body
    send, calls = _fake([{"id": 9, "comments": [{"id": 1, "content": MARKER + "\nold"}]}])
    assert post_or_update(body, ADO_ENV, send) == "updated"
    assert calls[-1] == ("PATCH", f"{THREADS}/9/comments/1?api-version=7.1", {"content": body})


def test_the_azure_devops_comment_refuses_without_a_pipeline_or_a_marker() -> None:
    with pytest.raises(UserError, match="SYSTEM_ACCESSTOKEN not set"):
        post_or_update(MARKER + "\n", {k: v for k, v in ADO_ENV.items() if k != "SYSTEM_ACCESSTOKEN"})
    with pytest.raises(UserError, match="FILE argument = \"hello\": the first line must be an aksgpu marker"):
        post_or_update("hello\n", ADO_ENV, _fake([])[0])


def _header(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if line.startswith("#"))


def test_the_pipeline_headers_name_only_the_checks_their_steps_run(shared: Path) -> None:
    """What the comment at the top of the checks workflow and of the Azure pipeline says they run
    on a pull request is what their steps run: each `aksgpu` command named there is a step, and
    neither claims to run tests (aksgpu's own tests are not run in a team's repository)."""
    azure = render_azure_devops(ci_settings(shared))[".azure-pipelines/aksgpu.yml"]
    checks = render_github(ci_settings(shared))[".github/workflows/aksgpu-checks.yml"]
    for text in (azure, checks):
        header = _header(text)
        assert not re.search(r"\bthe tests\b|\bpytest\b|\btests,", header), header
        steps = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
        named = re.findall(r"`aksgpu ([a-z-]+)[^`]*`|`(validate|render --check)`", header)
        commands = {first or second.split()[0] for first, second in named} - {"ci"}
        assert text is checks or commands >= {"render", "validate"}, header
        for command in commands:
            assert f".venv/bin/aksgpu {command}" in steps, command
        assert "pytest" not in steps


def _steps(document: Any) -> list[dict[str, Any]]:
    """Every step of an Azure pipeline, in jobs and in deployment jobs' strategies."""
    found: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "steps" and isinstance(value, list):
                    found.extend(step for step in value if isinstance(step, dict))
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(document)
    return found


def test_azure_pipeline_of_a_project_in_a_subfolder_runs_its_steps_there(shared: Path, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Azure Pipelines runs every step from the repository's root ($(System.DefaultWorkingDirectory)),
    wherever the pipeline file is (learn.microsoft.com/azure/devops/pipelines/tasks/reference/cmd-line-v2:
    workingDirectory defaults to it; the AzureCLI@2 task's input likewise): a project in a subfolder
    of a git repository gets its folder as each script step's and Azure CLI task's working
    directory, and as the triggers' path filter. At the root, nothing changes (the golden file)."""
    repository = tmp_path.parent / f"{tmp_path.name}-repository"
    (repository / ".git").mkdir(parents=True)
    project = repository / "platform" / "gpu"
    shutil.copytree(shared, project)
    monkeypatch.chdir(project)
    result = runner.invoke(app, ["ci", "azure-devops"])
    assert result.exit_code == 0, result.output
    written = project / ".azure-pipelines" / "aksgpu.yml"
    checked = _check_jsonschema("vendor.azure-pipelines", [written])
    assert checked.returncode == 0, checked.stdout + checked.stderr
    document = yaml.safe_load(written.read_text())
    assert document["trigger"]["paths"]["include"] == ["platform/gpu"] == document["pr"]["paths"]["include"]
    steps = _steps(document)
    scripts = [step for step in steps if "script" in step]
    azure_cli = [step for step in steps if step.get("task") == "AzureCLI@2"]
    assert scripts and azure_cli
    assert all(step.get("workingDirectory") == "platform/gpu" for step in scripts), scripts
    assert all(step["inputs"].get("workingDirectory") == "platform/gpu" for step in azure_cli)
    assert runner.invoke(app, ["ci", "azure-devops", "--check"]).exit_code == 0
