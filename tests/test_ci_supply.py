"""The supply chain of the CI aksgpu renders: every action pinned by commit to a node24 release,
every downloaded tool pinned by version and checked with `sha256sum -c` before it runs, no fork
code checked out by a privileged workflow, and tools/refresh_ci_tools.py's parsing."""

from __future__ import annotations

import hashlib
import io
import re
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.specifiers import SpecifierSet

from aksgpu.ci import tools as ci_tools
from aksgpu.ci.pipelines import ci_settings, render_azure_devops, render_github

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data" / "ci_supply"
SHARED_BACKEND = ("defaults:\n  backend: azblob://pulumi-state?storage_account=stpulumistate01\n"
                  "  secretsProvider: azurekeyvault://kv-pulumi-state.vault.azure.net/keys/pulumi-secrets\n")
sys.path.insert(0, str(REPO / "tools"))
import refresh_ci_tools  # noqa: E402


@pytest.fixture
def shared(project: Path) -> Path:
    path = project / "stacks" / "environments.yaml"
    path.write_text(path.read_text().replace("defaults:\n", SHARED_BACKEND, 1))
    return project


def _table() -> dict[str, Any]:
    return yaml.safe_load((REPO / "aksgpu" / "ci" / "data" / "ci_actions.yaml").read_text())["actions"]


def _upstream(action: str, tag: str) -> dict[str, Any]:
    """action.yml at the tag, as recorded from the upstream repository (tests/data/ci_supply)."""
    return yaml.safe_load((DATA / f"{action.replace('/', '__')}@{tag}.action.yml").read_text())


def _steps(text: str) -> list[dict[str, Any]]:
    workflow = yaml.safe_load(text)
    return [step for job in workflow["jobs"].values() for step in job.get("steps") or []]


def test_every_action_the_workflows_use_is_pinned_to_the_tables_commit(shared: Path) -> None:
    table, seen = _table(), set()
    for relative, text in render_github(ci_settings(shared)).items():
        for action, ref, tag in re.findall(r"uses: ([\w.-]+/[\w.-]+)@(\S+) # (\S+)", text):
            assert action in table, f"{relative}: {action} is not in ci_actions.yaml"
            assert re.fullmatch(r"[0-9a-f]{40}", ref) and ref == table[action]["sha"], f"{relative}: {action}@{ref}"
            assert tag == table[action]["tag"], f"{relative}: {action} tag comment {tag}"
            seen.add(action)
        assert len(re.findall(r"uses:", text)) == len(re.findall(r"uses: \S+@[0-9a-f]{40} # v", text)), relative
    assert seen == set(table), f"actions in the table but in no workflow: {set(table) - seen}"


@pytest.mark.parametrize("action", sorted(_table()))
def test_each_pinned_action_runs_on_node24_upstream_and_takes_the_inputs_passed(action: str, shared: Path) -> None:
    row = _table()[action]
    upstream = _upstream(action, row["tag"])
    assert upstream["runs"]["using"] == row["runs_using"] == "node24", action
    assert set(row["inputs"]) <= set(upstream["inputs"]), f"{action}: inputs gone at {row['tag']}"
    passed = {key for text in render_github(ci_settings(shared)).values() for step in _steps(text)
              if str(step.get("uses", "")).startswith(f"{action}@") for key in (step.get("with") or {})}
    assert passed and passed <= set(row["inputs"]), f"{action}: the workflows pass {passed - set(row['inputs'])}"


def test_the_loader_refuses_an_action_not_on_node24(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    text = (REPO / "aksgpu" / "ci" / "data" / "ci_actions.yaml").read_text()
    (tmp_path / "ci_actions.yaml").write_text(text.replace("runs_using: node24", "runs_using: node20", 1))
    monkeypatch.setattr(ci_tools, "DATA_DIR", tmp_path)
    ci_tools.action_pins.cache_clear()
    try:
        with pytest.raises(ValueError, match="node20"):
            ci_tools.action_pins()
    finally:
        ci_tools.action_pins.cache_clear()


def test_no_privileged_workflow_checks_out_code(shared: Path) -> None:
    """workflow_run and pull_request_target run with the base repository's token and secrets;
    checking out a fork's code there is the "pwn request" (checkout v7 refuses it by default)."""
    privileged = 0
    for relative, text in render_github(ci_settings(shared)).items():
        triggers = yaml.safe_load(text)[True]  # YAML 1.1 reads the key `on` as True
        if {"workflow_run", "pull_request_target"} & set(triggers):
            privileged += 1
            assert "actions/checkout" not in text, f"{relative} checks out code under {set(triggers)}"
    assert privileged == 1  # aksgpu-comment.yml


def _pipeline_scripts(shared: Path) -> list[str]:
    scripts = [str(step.get("run", "")) for text in render_github(ci_settings(shared)).values()
               for step in _steps(text)]

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            scripts.extend(str(value) for key, value in node.items() if key in ("script", "inlineScript"))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(yaml.safe_load(render_azure_devops(ci_settings(shared))[".azure-pipelines/aksgpu.yml"]))
    return scripts


def test_every_download_is_checked_before_it_is_used(shared: Path) -> None:
    tools = ci_tools.tool_pins()
    installs = 0
    for script in _pipeline_scripts(shared):
        assert "get.pulumi.com |" not in script and "az aks install-cli" not in script, script
        if "curl" not in script:
            continue
        installs += 1
        lines = script.splitlines()
        assert lines[0].strip().startswith("set -e"), "a failed check must stop the step"
        check = next(i for i, line in enumerate(lines) if "sha256sum -c" in line)
        for tool in tools.values():
            if tool.url in script:
                assert f"{tool.sha256} " in lines[check] and tool.file in lines[check]
                download = next(i for i, line in enumerate(lines) if tool.url in line)
                use = [i for i, line in enumerate(lines) if tool.file in line and i not in (download, check)]
                assert download < check < min(use), f"{tool.name} is used before its checksum is checked"
    assert installs >= 6


def test_the_pinned_pulumi_cli_is_in_aksgpus_pulumi_range() -> None:
    """The CI's CLI and the SDK aksgpu installs must be the same major version (the step fails
    otherwise); the pinned CLI must be one aksgpu's own dependency range allows."""
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    pulumi = next(dep for dep in dependencies if re.match(r"pulumi[<>=!~ ]", dep))
    assert ci_tools.tool_pins()["pulumi"].version in SpecifierSet(pulumi[len("pulumi"):])


def _fake_release(tmp_path: Path) -> dict[str, ci_tools.ToolPin]:
    """Pins whose URLs are local files of the real layouts, with their real checksums."""
    files = {}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name in ("pulumi/pulumi", "pulumi/pulumi-language-python"):
            data = b"#!/bin/sh\necho v3.255.0\n"
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            archive.addfile(info, io.BytesIO(data))
    files["pulumi"] = ("pulumi-v3.255.0-linux-x64.tar.gz", buffer.getvalue())
    files["kubectl"] = ("kubectl", b"#!/bin/sh\necho kubectl\n")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("bin/linux_amd64/kubelogin", "#!/bin/sh\necho kubelogin\n")
    files["kubelogin"] = ("kubelogin-linux-amd64.zip", buffer.getvalue())
    pins = {}
    for name, (filename, data) in files.items():
        (tmp_path / "release").mkdir(exist_ok=True)
        (tmp_path / "release" / filename).write_bytes(data)
        pin = ci_tools.tool_pins()[name]
        pins[name] = ci_tools.ToolPin(name, pin.version, f"file://{tmp_path}/release/{filename}",
                                      hashlib.sha256(data).hexdigest(), "", "vendor", "test")
    return pins


def _run(script: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    home, temp = tmp_path / "home", tmp_path / "temp"
    home.mkdir(exist_ok=True)
    temp.mkdir(exist_ok=True)
    venv = tmp_path / ".venv" / "bin"
    venv.mkdir(parents=True, exist_ok=True)
    (venv / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')  # this venv, with its pulumi
    (venv / "python").chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "RUNNER_TEMP": str(temp),
           "GITHUB_PATH": str(tmp_path / "github_path")}
    return subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True)


def test_the_install_steps_install_checked_tools_and_stop_on_a_bad_checksum(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pins = _fake_release(tmp_path)
    monkeypatch.setattr(ci_tools, "tool_pins", lambda: pins)
    result = _run(ci_tools.kube_install_script("github"), tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "home/.local/bin/kubelogin").read_text().endswith("echo kubelogin\n")
    assert (tmp_path / "home/.local/bin/kubectl").is_file()
    # The SDK in this venv is 3.x, as the pinned CLI: the Pulumi step installs it.
    result = _run(ci_tools.pulumi_install_script("github"), tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "home/.pulumi/bin/pulumi").is_file()
    assert (tmp_path / "github_path").read_text().splitlines()[-1].endswith("/.pulumi/bin")

    bad = dict(pins, kubelogin=ci_tools.ToolPin(**{**pins["kubelogin"].__dict__, "sha256": "0" * 64}))
    monkeypatch.setattr(ci_tools, "tool_pins", lambda: bad)
    (tmp_path / "home/.local/bin/kubelogin").unlink()
    result = _run(ci_tools.kube_install_script("github"), tmp_path)
    assert result.returncode != 0 and "FAILED" in result.stdout + result.stderr
    assert not (tmp_path / "home/.local/bin/kubelogin").exists()


def test_the_pulumi_step_fails_clearly_when_the_sdk_major_differs(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pins = _fake_release(tmp_path)
    pins["pulumi"] = ci_tools.ToolPin(**{**pins["pulumi"].__dict__, "version": "4.0.0"})
    monkeypatch.setattr(ci_tools, "tool_pins", lambda: pins)
    result = _run(ci_tools.pulumi_install_script("github"), tmp_path)
    assert result.returncode == 1
    assert "::error::the Pulumi SDK in .venv is 3." in result.stdout and "pinned Pulumi CLI is 4.0.0" in result.stdout
    assert not (tmp_path / "home/.pulumi/bin/pulumi").exists()


# --- tools/refresh_ci_tools.py (offline: recorded checksum files) -----------------------------


def test_refresh_reads_each_vendors_checksum_format() -> None:
    pulumi = (DATA / "pulumi-3.257.0-checksums.sample.txt").read_text()
    assert refresh_ci_tools.checksum_for(pulumi, "pulumi-v3.257.0-linux-arm64.tar.gz") == (
        "e5c22687e56f77ac094d4b74c0c48a2de0da699ce72644c9bf173d98980946a6")
    with pytest.raises(ValueError, match="linux-x64"):
        refresh_ci_tools.checksum_for(pulumi, "pulumi-v3.257.0-linux-x64.tar.gz")
    kubectl = (DATA / "kubectl-v1.34.1.sha256.sample").read_text()
    assert refresh_ci_tools.checksum_for(kubectl, "kubectl") == ci_tools.tool_pins()["kubectl"].sha256
    kubelogin = (DATA / "kubelogin-v0.2.20-linux-amd64.zip.sha256.sample").read_text()
    assert refresh_ci_tools.checksum_for(kubelogin, "kubelogin-linux-amd64.zip") == (
        ci_tools.tool_pins()["kubelogin"].sha256)


def test_refresh_builds_rows_from_the_latest_release_and_writes_the_table(tmp_path: Path) -> None:
    pages = {
        "https://api.github.com/repos/Azure/kubelogin/releases/latest": '{"tag_name": "v0.2.20"}',
        "https://github.com/Azure/kubelogin/releases/download/v0.2.20/kubelogin-linux-amd64.zip.sha256":
            (DATA / "kubelogin-v0.2.20-linux-amd64.zip.sha256.sample").read_text(),
        "https://dl.k8s.io/release/v1.34.1/bin/linux/amd64/kubectl.sha256":
            (DATA / "kubectl-v1.34.1.sha256.sample").read_text(),
    }
    kubelogin = refresh_ci_tools.refreshed_row("kubelogin", None, pages.__getitem__, today="2026-11-27")
    kubectl = refresh_ci_tools.refreshed_row("kubectl", "v1.34.1", pages.__getitem__, today="2026-11-27")
    current = ci_tools.tool_pins()
    for row, name in ((kubelogin, "kubelogin"), (kubectl, "kubectl")):
        assert (row["version"], row["url"], row["sha256"]) == (current[name].version, current[name].url,
                                                               current[name].sha256)
    table = tmp_path / "ci_tools.yaml"
    table.write_text((REPO / "aksgpu" / "ci" / "data" / "ci_tools.yaml").read_text())
    refresh_ci_tools.write_table({"kubelogin": {**kubelogin, "version": "v9.9.9"}}, table)
    written = yaml.safe_load(table.read_text())["tools"]
    assert written["kubelogin"]["version"] == "v9.9.9" and written["pulumi"]["version"] == "3.255.0"
    assert table.read_text().startswith("# Command-line tools the generated CI downloads")
