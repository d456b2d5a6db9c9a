"""`aksgpu new`: where the project installs aksgpu from (--aksgpu-source), and what every
environment of the new project inherits."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from aksgpu.ci.install_source import parse_source
from aksgpu.cli.app import app
from aksgpu.errors import UserError

COMMIT = "0123456789abcdef0123456789abcdef01234567"
SHA = "ab" * 32
ADMIN = "5f0c4a8e-2b7d-4c1e-9a3f-6d8b1e2c7a90"
runner = CliRunner()


def test_a_git_source_needs_a_full_commit() -> None:
    source = parse_source(f"git+https://git.example.com/p/aksgpu@{COMMIT}", "0.1.0")
    assert source.lines[-1] == f"aksgpu[policy] @ git+https://git.example.com/p/aksgpu@{COMMIT}"
    for mutable in ("main", "v0.2.0", COMMIT[:12]):
        with pytest.raises(UserError) as raised:
            parse_source(f"git+https://git.example.com/p/aksgpu@{mutable}", "0.1.0")
        message = str(raised.value)
        assert message.startswith(f'--aksgpu-source = "git+https://git.example.com/p/aksgpu@{mutable}"')
        assert "40-hex commit" in message and "Fix: take the commit with `git rev-parse HEAD`" in message


def test_a_wheel_url_is_https_with_its_sha256() -> None:
    url = f"https://pkgs.example.com/aksgpu-0.2.0-py3-none-any.whl#sha256={SHA}"
    assert parse_source(url, "0.1.0").lines[-1] == f"aksgpu[policy] @ {url}"
    for bad in (url.split("#")[0], url.replace("https:", "http:"), url.replace(".whl", ".tar.gz")):
        with pytest.raises(UserError, match=r"^--aksgpu-source = .*#sha256=<64 hex>.*Fix: append #sha256="):
            parse_source(bad, "0.1.0")


def test_an_index_source_pins_the_version_with_index_url_not_extra() -> None:
    lines = parse_source("index+https://pkgs.example.com/simple/", "0.2.0").lines
    assert "--index-url https://pkgs.example.com/simple/" in lines and lines[-1] == "aksgpu[policy]==0.2.0"
    assert not any(line.startswith("--extra-index-url") for line in lines)
    with pytest.raises(UserError, match="development build"):
        parse_source("index+https://pkgs.example.com/simple/", "0.2.1.dev3+gabc")
    with pytest.raises(UserError, match="https URL of a package index"):
        parse_source("index+http://pkgs.example.com/simple/", "0.2.0")


def test_a_wheel_file_is_copied_into_vendor_and_installed_by_relative_path(tmp_path: Path) -> None:
    from aksgpu.ci.scaffold import new_project
    from aksgpu.environments.initialize import InitRequest

    wheel = tmp_path / "dist" / "aksgpu-0.2.0-py3-none-any.whl"
    wheel.parent.mkdir()
    wheel.write_bytes(b"not really a wheel")
    source = parse_source(str(wheel), "0.2.0")
    made = new_project(tmp_path / "infra", InitRequest("dev", "dev", location="eastus2"), source, github=False)
    requirements = (made.directory / "requirements.txt").read_text()
    assert requirements.splitlines()[-1] == "./vendor/aksgpu-0.2.0-py3-none-any.whl[policy]"
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() in requirements
    assert (made.directory / "vendor" / wheel.name).read_bytes() == wheel.read_bytes()
    assert "aksgpu[policy]==" not in requirements


@pytest.mark.parametrize("value", ["dist/nosuch.whl", "aksgpu==0.1.0", "ftp://x/aksgpu-0.1.0-py3-none-any.whl"])
def test_a_bad_source_is_one_message_with_the_option_the_value_and_the_fix(tmp_path: Path, value: str) -> None:
    result = runner.invoke(app, ["new", str(tmp_path / "infra"), "--location", "eastus2", "--aksgpu-source", value])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f'--aksgpu-source = "{value}"' in result.output and "Fix:" in result.output
    assert not (tmp_path / "infra").exists()


def test_without_a_source_an_editable_aksgpu_asks_for_one(tmp_path: Path) -> None:
    # This test environment's aksgpu is an editable install: no wheel or commit to point at.
    result = runner.invoke(app, ["new", str(tmp_path / "infra"), "--location", "eastus2"])
    assert result.exit_code == 2 and "pass --aksgpu-source" in result.output
    assert not (tmp_path / "infra").exists()


def test_the_admin_group_of_new_reaches_every_later_environment(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "infra"
    result = runner.invoke(app, ["new", str(project), "--location", "eastus2", "--admin-group", ADMIN, "--no-github",
                                 "--aksgpu-source", f"git+https://git.example.com/p/aksgpu@{COMMIT}"])
    assert result.exit_code == 0, result.output
    authored = yaml.safe_load((project / "stacks" / "environments.yaml").read_text())
    assert authored["defaults"]["overrides"]["access"]["aad"]["adminGroupObjectIds"] == [ADMIN]
    monkeypatch.chdir(project)
    result = runner.invoke(app, ["init", "prod", "--preset", "inference", "--location", "westeurope"])
    assert result.exit_code == 0, result.output
    for env in ("dev", "prod"):
        stack = yaml.safe_load((project / "stacks" / f"Pulumi.{env}.yaml").read_text())
        assert stack["config"]["aksgpu:cluster"]["access"]["aad"]["adminGroupObjectIds"] == [ADMIN], env


def _new(directory: Path, *extra: str) -> None:
    result = runner.invoke(app, ["new", str(directory), "--location", "eastus2", *extra,
                                 "--aksgpu-source", f"git+https://git.example.com/p/aksgpu@{COMMIT}"])
    assert result.exit_code == 0, result.output


def test_a_project_at_the_repository_root_keeps_its_workflows_and_steps_at_the_root(tmp_path: Path) -> None:
    _new(tmp_path / "infra")
    checks = yaml.safe_load((tmp_path / "infra" / ".github" / "workflows" / "aksgpu-checks.yml").read_text())
    assert "defaults" not in checks and "paths" not in (checks[True]["pull_request"] or {})


def test_a_project_in_a_subfolder_of_a_git_repository_gets_its_workflows_at_the_root(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    import sys

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    project = tmp_path / "platform" / "infra"
    _new(project)
    assert not (project / ".github").exists()
    workflows = tmp_path / ".github" / "workflows"
    checks = yaml.safe_load((workflows / "aksgpu-checks.yml").read_text())
    assert checks["defaults"] == {"run": {"working-directory": "platform/infra"}}
    assert checks[True]["pull_request"]["paths"] == ["platform/infra/**", ".github/workflows/aksgpu-*.yml"]
    steps = checks["jobs"]["offline"]["steps"]
    assert steps[1]["with"]["cache-dependency-path"] == "platform/infra/requirements.txt"
    assert steps[-1]["with"]["path"] == "platform/infra/aksgpu-comment/"
    valid = subprocess.run([str(Path(sys.executable).with_name("check-jsonschema")), "--builtin-schema",
                            "vendor.github-workflows", *map(str, workflows.glob("*.yml"))], capture_output=True,
                           text=True, check=False)
    assert valid.returncode == 0, valid.stdout + valid.stderr
    monkeypatch.chdir(project)  # `aksgpu ci github` finds the same root and renders the same files
    result = runner.invoke(app, ["ci", "github", "--check"])
    assert result.exit_code == 0, result.output
    assert ".github/workflows/aksgpu-checks.yml: up to date" in result.output
    # A second project in the same repository would take over the first one's workflows: refused.
    other = runner.invoke(app, ["new", str(tmp_path / "other"), "--location", "eastus2",
                                "--aksgpu-source", f"git+https://git.example.com/p/aksgpu@{COMMIT}"])
    assert other.exit_code == 2 and "already has aksgpu's workflows" in other.output
    assert not (tmp_path / "other").exists()
