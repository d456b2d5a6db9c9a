"""`aksgpu ci`: CI for the repository that holds an aksgpu project, rendered from templates/ci/.

Pull requests get the offline checks with no cloud credentials (so they work from forks) and a
plan summary as one comment that is updated; same-repository pull requests also get a real
preview of each changed environment; merges to the default branch deploy each environment behind
its GitHub environment (reviewers), production last; a schedule checks for drift. Only
environments with a shared state backend (azblob or Pulumi Cloud) can be previewed or deployed
from CI: a runner's local state would be lost when the job ends.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aksgpu.ci.tools import kube_install_script, pulumi_install_script, uses
from aksgpu.errors import MISSING, Problem, UserError

TEMPLATES_DIR = Path(__file__).resolve().parents[1] / "templates" / "ci"
# Files whose change can change every environment's preview (the program and its dependencies);
# a stack file changes only its own environment (environments.yaml changes show in stack files).
SHARED_PATHS = ("__main__.py", "Pulumi.yaml", "pyproject.toml", "requirements.txt", "aksgpu/")
PYTHON_VERSION = "3.11"


@dataclass(frozen=True)
class CiEnvironment:
    name: str  # the stack: an environment's, or a fleet's shared stack or member stack
    backend: str | None  # None: the local file backend
    backend_kind: str  # file | azblob | cloud
    secrets_provider: str | None
    protected: bool
    # The environment whose Azure identities, GitHub environment and service connections the stack
    # uses: its own, or for a fleet's stacks the fleet environment's. None: the stack's name.
    environment: str | None = None
    # `aksgpu up` arguments after the stack: a fleet's shared stack deploys alone (its members have jobs of their own).
    up_flags: str = ""

    @property
    def identity(self) -> str:
        return self.environment or self.name

    @property
    def shared(self) -> bool:
        return self.backend_kind != "file"


@dataclass(frozen=True)
class CiSettings:
    environments: list[CiEnvironment]  # deploy order: as listed in environments.yaml, protected ones last
    branch: str
    python_version: str
    policy_pack: str | None  # a Pulumi policy pack folder in the project, applied to previews
    # How CI installs aksgpu: the version a project pins in requirements.txt (a project made with
    # `aksgpu new`), or the package itself when the project is aksgpu's own repository.
    dependency_file: str = "requirements.txt"
    # The project folder relative to the repository root ("" at the root): GitHub runs workflows
    # only from the root's .github/workflows, so a project in a subfolder gets them there, with
    # that folder as every run step's working directory and its path as the trigger filter.
    directory: str = ""

    @property
    def install_args(self) -> str:
        return "-r requirements.txt" if self.dependency_file == "requirements.txt" else "-e ."

    @property
    def prefix(self) -> str:
        """The project folder as a prefix of repository-root paths (actions' inputs, hashFiles,
        files github-script reads: those ignore the run steps' working directory)."""
        return f"{self.directory}/" if self.directory else ""

    @property
    def shared(self) -> list[CiEnvironment]:
        return [env for env in self.environments if env.shared]

    @property
    def local_only(self) -> list[str]:
        return [env.name for env in self.environments if not env.shared]

    @property
    def needs_passphrase(self) -> bool:
        return any(env.secrets_provider == "passphrase" for env in self.shared)

    @property
    def needs_pulumi_token(self) -> bool:
        return any(env.backend_kind == "cloud" for env in self.shared)


def repository_root(project_dir: Path) -> Path:
    """The root of the git repository `project_dir` is in (the nearest folder up with a .git
    folder or file), or `project_dir` itself when it is in none."""
    start = project_dir.resolve()
    return next((folder for folder in (start, *start.parents) if (folder / ".git").exists()), start)


def ci_settings(project_dir: Path, branch: str = "main", python_version: str = PYTHON_VERSION,
                root: Path | None = None) -> CiSettings:
    """What the CI templates need from environments.yaml and the rendered specs; `root`: the
    repository root the workflows go under (default: the project folder)."""
    from aksgpu.environments.file import UPGRADES, load_environments
    from aksgpu.environments.fleet import effective_fleet, is_fleet
    from aksgpu.environments.render import effective_environment
    from aksgpu.workflow.target import backend_kind
    from aksgpu.spec import SpecError

    environments = load_environments(project_dir)
    if not environments.names:
        raise UserError(problems=[Problem("environments", MISSING, "the file has no environments, so there is "
                                          "nothing for CI to check", "add one with `aksgpu init dev --preset dev`",
                                          source=environments.relative_path)])
    found = []
    for name in environments.names:
        environment = environments.get(name)
        kind = backend_kind(environment.backend) if environment.backend else "file"
        try:
            if is_fleet(environments, name):
                # The shared stack, each member, then the upgrades stack; they keep together in the deploy order.
                fleet = effective_fleet(environments, name)
                protected = fleet.spec.protect or any(member.spec.protect for member in fleet.members)
                stacks = ([(name, " --no-members")] + [(member.stack, "") for member in fleet.spec.members]
                          + [(f"{name}-{UPGRADES}", "")])
                found += [CiEnvironment(stack, environment.backend, kind, environment.secrets_provider, protected,
                                        name, flags) for stack, flags in stacks]
                continue
            protected = effective_environment(environments, name).spec.protect
        except SpecError as error:
            raise UserError(f"environment {name} is not valid, so CI cannot be rendered for it:\n{error}",
                            problems=error.problems, source=error.source) from None
        found.append(CiEnvironment(name, environment.backend, kind, environment.secrets_provider, protected))
    ordered = [env for env in found if not env.protected] + [env for env in found if env.protected]
    policy = project_dir / "policy"
    dependency_file = "requirements.txt" if (project_dir / "requirements.txt").is_file() else "pyproject.toml"
    directory = ""
    if root is not None:
        try:
            directory = project_dir.resolve().relative_to(root.resolve()).as_posix()
        except ValueError:
            raise UserError(problems=[Problem("--output-dir", str(root), f"the project folder {project_dir} is not "
                                              "inside it, and the workflows go under the repository root",
                                              "name the root of the repository that holds the project")]) from None
    return CiSettings(ordered, branch, python_version,
                      "policy" if (policy / "PulumiPolicy.yaml").is_file() else None, dependency_file,
                      "" if directory == "." else directory)


def _jinja() -> Any:
    """jinja2 with [[ ]] / [% %] delimiters, so GitHub's and Azure's ${{ }} pass through untouched."""
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES_DIR), undefined=jinja2.StrictUndefined,
        variable_start_string="[[", variable_end_string="]]", block_start_string="[%", block_end_string="%]",
        comment_start_string="[#", comment_end_string="#]", keep_trailing_newline=True, trim_blocks=True,
        lstrip_blocks=True, autoescape=False)


GITHUB_WORKFLOWS = {
    "checks": ".github/workflows/aksgpu-checks.yml",
    "comment": ".github/workflows/aksgpu-comment.yml",
    "preview": ".github/workflows/aksgpu-preview.yml",
    "deploy": ".github/workflows/aksgpu-deploy.yml",
    "drift": ".github/workflows/aksgpu-drift.yml",
}


# When the drift check runs (UTC): early, away from the hour most schedules pick.
DRIFT_CRON = "17 5 * * *"


def job_id(environment: str) -> str:
    """A workflow job id for an environment: letters, digits, '-' and '_' only."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", environment)


def render_github(settings: CiSettings) -> dict[str, str]:
    """The workflow files (path relative to the repository root -> text); the ones that need Azure
    only when some environment has a shared backend."""
    from aksgpu.ci.oidc_settings import GITHUB_VARIABLES, deploy_client_variable, plan_client_variable
    from aksgpu.plan.summary import MARKER
    from aksgpu.project.generated import stamp, stamp_placeholder

    jinja = _jinja()
    names = ["checks", "comment"] + (["preview", "deploy", "drift"] if settings.shared else [])
    files = {}
    for name in names:
        text = jinja.get_template(f"github/{name}.yml.j2").render(
            settings=settings, uses=uses, stamp_line=stamp_placeholder(), variables=GITHUB_VARIABLES,
            plan_client=plan_client_variable, deploy_client=deploy_client_variable, job_id=job_id,
            shared_names=json.dumps([env.name for env in settings.shared]), marker=MARKER,
            drift_cron=DRIFT_CRON, template=f"templates/ci/github/{name}.yml.j2",
            install_pulumi=pulumi_install_script("github"), install_kube=kube_install_script("github"))
        files[GITHUB_WORKFLOWS[name]] = stamp(text)
    return files


AZURE_DEVOPS_PIPELINE = ".azure-pipelines/aksgpu.yml"


def plan_connection(environment: str) -> str:
    """The Azure DevOps service connection previews and drift checks of an environment sign in with."""
    return f"aksgpu-{environment}-plan"


def deploy_connection(environment: str) -> str:
    """The Azure DevOps service connection deploys of an environment sign in with."""
    return f"aksgpu-{environment}-deploy"


def render_azure_devops(settings: CiSettings) -> dict[str, str]:
    """The Azure Pipelines file (path relative to the repository root -> text)."""
    from aksgpu.project.generated import stamp, stamp_placeholder

    identities = dict.fromkeys(env.identity for env in settings.shared)
    connections = [name for env in identities for name in (plan_connection(env), deploy_connection(env))]
    text = _jinja().get_template("azure-devops/aksgpu.yml.j2").render(
        settings=settings, stamp_line=stamp_placeholder(), job_id=job_id, plan_connection=plan_connection,
        deploy_connection=deploy_connection, service_connections=connections, drift_cron=DRIFT_CRON,
        template="templates/ci/azure-devops/aksgpu.yml.j2", install_pulumi=pulumi_install_script("azure-devops"),
        install_kube=kube_install_script("azure-devops"))
    return {AZURE_DEVOPS_PIPELINE: stamp(text)}


# --- which environments a change touches --------------------------------------------------


def changed_files(project_dir: Path, base: str, head: str = "HEAD") -> list[str]:
    """Project-relative paths changed between the merge base of `base` and `head`, and `head`."""
    prefix = _git(project_dir, "rev-parse", "--show-prefix").strip()
    output = _git(project_dir, "diff", "--name-only", f"{base}...{head}", "--", ".")
    return [line[len(prefix):] for line in output.splitlines() if line.startswith(prefix)]


def changed_environments(files: list[str], environments: list[str], stack_dir: str = "stacks",
                         fleets: dict[str, list[str]] | None = None) -> list[str]:
    """The stacks whose preview a change can alter: all when the program changed, else those whose
    stack file changed, and the members of a fleet whose shared stack changed (they read its
    outputs). `environments`: every stack, in order; `fleets`: a fleet's shared stack -> its member
    stacks. A change to one member's stack touches that member only."""
    if any(path == shared or (shared.endswith("/") and path.startswith(shared))
           for path in files for shared in SHARED_PATHS):
        return list(environments)
    touched = {name for name in environments if f"{stack_dir}/Pulumi.{name}.yaml" in set(files)}
    for shared, members in (fleets or {}).items():
        if shared in touched:
            touched.update(members)
    return [name for name in environments if name in touched]


def _git(cwd: Path, *args: str) -> str:
    try:
        result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise UserError("git is not installed. Fix: install git (CI images have it).") from None
    if result.returncode != 0:
        detail = (result.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise UserError(f"`git {' '.join(args)}` failed: {detail}. Fix: run inside the repository's clone, with "
                        "the base commit fetched (actions/checkout with fetch-depth: 0).")
    return result.stdout
