"""What the generated CI downloads: GitHub Actions pinned by commit (data/ci_actions.yaml) and the
Pulumi CLI, kubectl and kubelogin pinned by version and SHA-256 (data/ci_tools.yaml), with the shell
steps that install those tools and check each download with `sha256sum -c` before it runs."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

DATA_DIR = Path(__file__).resolve().parent / "data"
SHA1 = re.compile(r"[0-9a-f]{40}")
SHA256 = re.compile(r"[0-9a-f]{64}")
# GitHub removed Node 20 from its runners on 2026-09-16: every pinned action must run on this.
ACTION_RUNTIME = "node24"


@dataclass(frozen=True)
class ActionPin:
    name: str  # owner/repository
    tag: str
    sha: str  # the full commit the tag points to
    runs_using: str  # `runs.using` of action.yml at the tag
    inputs: tuple[str, ...]  # the inputs the templates pass

    @property
    def uses(self) -> str:
        return f"{self.name}@{self.sha} # {self.tag}"


@dataclass(frozen=True)
class ToolPin:
    name: str
    version: str
    url: str
    sha256: str
    checksums_url: str
    grade: str  # vendor | corroborated
    source: str

    @property
    def file(self) -> str:
        return self.url.rsplit("/", 1)[-1]


def _check(condition: bool, table: str, row: str, message: str) -> None:
    if not condition:
        raise ValueError(f"aksgpu/ci/data/{table}: {row}: {message}")


@functools.cache
def action_pins() -> dict[str, ActionPin]:
    """The pinned GitHub Actions, checked: a 40-hex commit and node24 each."""
    rows = yaml.safe_load((DATA_DIR / "ci_actions.yaml").read_text(encoding="utf-8"))["actions"]
    pins = {}
    for name, row in rows.items():
        pin = ActionPin(name, str(row["tag"]), str(row["sha"]), str(row["runs_using"]), tuple(row["inputs"]))
        _check(bool(SHA1.fullmatch(pin.sha)), "ci_actions.yaml", name, f"sha {pin.sha!r} is not a full commit")
        _check(pin.runs_using == ACTION_RUNTIME, "ci_actions.yaml", name,
               f"runs_using {pin.runs_using!r}: GitHub runners run {ACTION_RUNTIME} actions only")
        pins[name] = pin
    return pins


@functools.cache
def tool_pins() -> dict[str, ToolPin]:
    """The pinned tools, checked: a 64-hex SHA-256 and a URL that names the version."""
    rows = yaml.safe_load((DATA_DIR / "ci_tools.yaml").read_text(encoding="utf-8"))["tools"]
    pins = {}
    for name, row in rows.items():
        pin = ToolPin(name, str(row["version"]), row["url"], row["sha256"], row["checksums_url"], row["grade"],
                      " ".join(str(row["source"]).split()))
        _check(bool(SHA256.fullmatch(pin.sha256)), "ci_tools.yaml", name, f"sha256 {pin.sha256!r} is not 64 hex")
        _check(pin.version.lstrip("v") in pin.url, "ci_tools.yaml", name, f"url does not name {pin.version}")
        _check(pin.url.startswith("https://"), "ci_tools.yaml", name, "url must be https")
        _check(pin.grade in ("vendor", "corroborated"), "ci_tools.yaml", name, f"grade {pin.grade!r}")
        pins[name] = pin
    return pins


def uses(action: str) -> str:
    """A workflow `uses:` value: the action at its pinned commit, the tag in a comment."""
    return action_pins()[action].uses


# --- install steps (shell, unindented; the templates indent them) ---------------------------


def _log(system: str, level: str, message: str) -> str:
    if system == "github":
        return f'echo "::{level}::{message}"'
    kind = "error" if level == "error" else "warning"  # Azure Pipelines has no notice
    return f'echo "##vso[task.logissue type={kind}]{message}"'


def _add_path(system: str, folder: str) -> str:
    if system == "github":
        return f'echo "{folder}" >> "$GITHUB_PATH"'
    return f'echo "##vso[task.prependpath]{folder}"'


def pulumi_install_script(system: str) -> str:
    """Download the pinned Pulumi CLI, check its SHA-256, compare it with the installed Pulumi SDK.
    `system`: github | azure-devops. Runs from the repository root, after .venv is installed."""
    pulumi = tool_pins()["pulumi"]
    temp = "$RUNNER_TEMP" if system == "github" else "$AGENT_TEMPDIRECTORY"
    mismatch = ("the Pulumi SDK in .venv is $sdk but the pinned Pulumi CLI is $cli: their major versions "
                "differ. Fix: use an aksgpu release whose CI pins a Pulumi CLI of the same major version, "
                "or pin pulumi to a $cli_major.x release in requirements.txt.")
    notice = "Pulumi SDK $sdk runs with the pinned Pulumi CLI $cli (aksgpu/ci/data/ci_tools.yaml)."
    lines = [
        "set -e  # Azure Pipelines runs scripts without it (microsoft/azure-pipelines-agent#1803)",
        f"cli={pulumi.version}",
        "sdk=\"$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version(\"pulumi\"))')\"",
        'cli_major="${cli%%.*}"',
        'if [ "${sdk%%.*}" != "$cli_major" ]; then',
        f"  {_log(system, 'error', mismatch)}",
        "  exit 1",
        'elif [ "$sdk" != "$cli" ]; then',
        f"  {_log(system, 'notice', notice)}",
        "fi",
        f'cd "{temp}"',
        f"curl -fsSLo {pulumi.file} {pulumi.url}",
        f'echo "{pulumi.sha256}  {pulumi.file}" | sha256sum -c -',
        'mkdir -p "$HOME/.pulumi/bin"',
        f'tar -xzf {pulumi.file} -C "$HOME/.pulumi/bin" --strip-components=1',
        _add_path(system, "$HOME/.pulumi/bin"),
    ]
    return "\n".join(lines)


def kube_install_script(system: str) -> str:
    """Download the pinned kubectl and kubelogin, check both SHA-256s, install to ~/.local/bin."""
    kubectl, kubelogin = tool_pins()["kubectl"], tool_pins()["kubelogin"]
    temp = "$RUNNER_TEMP" if system == "github" else "$AGENT_TEMPDIRECTORY"
    lines = [
        "set -e",
        f'mkdir -p "$HOME/.local/bin" && cd "{temp}"',
        f"curl -fsSLo {kubectl.file} {kubectl.url}",
        f"curl -fsSLo {kubelogin.file} {kubelogin.url}",
        f"printf '%s  %s\\n' {kubectl.sha256} {kubectl.file} {kubelogin.sha256} {kubelogin.file} | sha256sum -c -",
        f'install -m 0755 {kubectl.file} "$HOME/.local/bin/kubectl"',
        f"unzip -o -q {kubelogin.file} -d kubelogin",
        'install -m 0755 kubelogin/bin/linux_amd64/kubelogin "$HOME/.local/bin/kubelogin"',
        _add_path(system, "$HOME/.local/bin"),
    ]
    return "\n".join(lines)
