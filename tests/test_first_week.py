"""The first week's findings (issue 26): each test fails without its fix.

Symbolic links that loop, inputs too large to read, YAML tab errors, a stale preset description,
two `aksgpu init` at once, Ctrl-C during start-up, --quiet and NO_COLOR, tables that fit."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from aksgpu.cli.app import app
from aksgpu.project.yaml_input import YamlProblem, parse_yaml
from tests.helpers import EXAMPLE

runner = CliRunner()
ADMIN = "11111111-1111-1111-1111-111111111111"


@pytest.fixture
def example_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    project = tmp_path / "project"
    shutil.copytree(EXAMPLE, project)
    monkeypatch.chdir(project)
    return project


def test_environments_file_linked_to_itself_is_a_user_error(empty_project: Path) -> None:
    stacks = empty_project / "stacks"
    stacks.mkdir()
    (stacks / "environments.yaml").symlink_to("environments.yaml")
    for args in (["validate", "dev"], ["init", "dev", "--preset", "dev", "--admin-group", ADMIN]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert "environments.yaml is a symbolic link" in result.output
        assert "internal error" not in result.output


def test_stack_file_linked_to_itself_is_a_user_error(example_project: Path) -> None:
    stack = example_project / "stacks" / "Pulumi.dev.yaml"
    stack.unlink()
    stack.symlink_to("Pulumi.dev.yaml")
    result = runner.invoke(app, ["render", "dev"])
    assert result.exit_code == 2, result.output
    assert "Pulumi.dev.yaml is a symbolic link" in result.output


def test_an_environments_file_over_a_mebibyte_is_refused_at_once(example_project: Path) -> None:
    path = example_project / "stacks" / "environments.yaml"
    path.write_text(path.read_text() + "# " + "x" * (1024 * 1024) + "\n")
    result = runner.invoke(app, ["validate", "dev"])
    assert result.exit_code == 2, result.output
    assert "environments.yaml is larger than 1 MiB" in result.output


@pytest.mark.parametrize("text, line, column", [("a:\n\tb: 1\n", 2, 1), ("a:\n  b: 1\n  \tc: 2\n", 3, 3)])
def test_a_tab_in_yaml_is_named(text: str, line: int, column: int) -> None:
    with pytest.raises(YamlProblem) as caught:
        parse_yaml(text)
    message = str(caught.value)
    assert f"a tab character at line {line} column {column}: YAML indents with spaces" in message
    assert "Fix: replace tabs with spaces" in message


def test_fleet_preset_description_names_the_nat_gateway_it_sets() -> None:
    from aksgpu.environments.presets import load_preset

    preset = load_preset("fleet")
    assert preset.spec["network"]["outbound"] == "userAssignedNATGateway"
    assert "managed NAT gateway" not in preset.description
    assert "user-assigned NAT gateway" in preset.description


def test_quiet_leaves_out_status_lines_but_not_errors(example_project: Path) -> None:
    loud = runner.invoke(app, ["plan", "dev", "--manifests", "out-loud"])
    assert loud.exit_code == 0, loud.output
    assert "wrote " in loud.stderr
    quiet = runner.invoke(app, ["--quiet", "plan", "dev", "--manifests", "out-quiet"])
    assert quiet.exit_code == 0, quiet.output
    assert "wrote " not in quiet.stderr
    assert quiet.stdout == loud.stdout.replace("out-loud", "out-quiet")
    failed = runner.invoke(app, ["-q", "validate", "nosuchenv"])
    assert failed.exit_code == 2
    assert "nosuchenv" in failed.stderr


def test_no_color_turns_colour_off_even_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console

    def styled(environ: dict[str, str]) -> str:
        console = Console(force_terminal=True, width=80, _environ=environ)
        with console.capture() as captured:
            console.print("[red]drift[/red]")
        return captured.get()

    assert "\x1b[" in styled({})
    assert "\x1b[" not in styled({"NO_COLOR": "1"})
    assert "\x1b[" in styled({"NO_COLOR": ""}), "an empty NO_COLOR leaves colour on (no-color.org)"
    # say() builds its Console from the process environment: NO_COLOR reaches it.
    from aksgpu.cli import console as cli_console

    printed: list[Console] = []
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setattr(cli_console.OUTPUT, "quiet", False)
    monkeypatch.setattr("rich.console.Console.print", lambda self, *a, **k: printed.append(self))
    cli_console.say("status", "red")
    assert printed and printed[0].no_color


def test_tables_fit_an_80_column_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a terminal table_width() is None and rich takes the terminal's width (COLUMNS); the
    tables wrap to it rather than running past the edge."""
    import sys

    from rich.console import Console

    from aksgpu.cli import console as cli_console

    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    assert cli_console.table_width() is None
    assert Console().width == 80
    monkeypatch.setattr("aksgpu.cli.environments.commands.table_width", lambda: None)
    result = runner.invoke(app, ["presets", "show", "fleet"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) > 20
    assert max(len(line) for line in lines) <= 80, max(lines, key=len)


def test_diff_keeps_long_field_paths_whole_when_piped(example_project: Path) -> None:
    import yaml

    path = example_project / "stacks" / "environments.yaml"
    document = yaml.safe_load(path.read_text())
    document["environments"]["prod"]["overrides"]["tags"]["team"] = "x" * 150
    path.write_text(yaml.safe_dump(document))
    result = runner.invoke(app, ["diff", "dev", "prod"])
    assert result.exit_code == 0, result.output
    assert "…" not in result.stdout
    tags = [line for line in result.stdout.splitlines() if line.split()[:1] == ["tags"]]
    assert len(tags) == 1 and "x" * 150 in tags[0], "the path and its long value whole on one line"
    paths = [line.split()[0] for line in result.stdout.splitlines()[1:] if line.strip()]
    assert "controlPlane.maintenanceWindows[nodeOsUpgrade].durationHours" in paths, paths


def test_ctrl_c_while_aksgpu_loads_is_one_line_and_exit_130(tmp_path: Path) -> None:
    """An interrupt raised while app.py is imported (as Ctrl-C in the first second does), made
    deterministic by a sitecustomize import hook; the console script is cli/entry.py's main."""
    import subprocess
    import sys
    import tomllib

    from tests.helpers import REPO as REPO_ROOT

    scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["aksgpu"] == "aksgpu.cli.entry:main"
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\n"
        "class Interrupt:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'aksgpu.cli.app':\n"
        "            raise KeyboardInterrupt\n"
        "sys.meta_path.insert(0, Interrupt())\n")
    environment = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO_ROOT}"}
    result = subprocess.run([sys.executable, "-c", "from aksgpu.cli.entry import main; main()", "--help"],
                            capture_output=True, text=True, env=environment, timeout=60)
    assert result.returncode == 130, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        "interrupted. Files aksgpu writes are replaced whole, so each is as it was or complete."]


def _init_in(project: str, environment: str) -> int:
    """One `aksgpu init` in its own process (multiprocessing target)."""
    os.chdir(project)
    result = CliRunner().invoke(app, ["init", environment, "--preset", "dev", "--location", "eastus2",
                                      "--admin-group", ADMIN])
    return result.exit_code


def test_two_inits_at_once_both_keep_their_environment(empty_project: Path) -> None:
    import multiprocessing

    import yaml

    names = [f"env{i}" for i in range(6)]
    context = multiprocessing.get_context("fork")
    with context.Pool(len(names)) as pool:
        codes = pool.starmap(_init_in, [(str(empty_project), name) for name in names])
    assert codes == [0] * len(names)
    document = yaml.safe_load((empty_project / "stacks" / "environments.yaml").read_text())
    assert sorted(document["environments"]) == names
    for name in names:
        assert (empty_project / "stacks" / f"Pulumi.{name}.yaml").is_file()


def test_cost_in_a_region_without_prices_says_so(example_project: Path) -> None:
    path = example_project / "stacks" / "environments.yaml"
    document = yaml.safe_load(path.read_text())
    document["environments"]["dev"].setdefault("overrides", {})["location"] = "southafricanorth"
    path.write_text(yaml.safe_dump(document))
    # A new location replaces the cluster: render refuses it unless told (environments/replacement.py).
    assert runner.invoke(app, ["render", "dev", "--allow-replace"]).exit_code == 0
    for args in (["cost", "dev"], ["plan", "dev"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        assert "$0.00 / $0.00" not in result.stdout
        lines = result.stdout.splitlines()
        assert any(line.split()[:2] == ["node", "pools"] and "no price" in line for line in lines), result.stdout
        assert "total (prices missing: a lower bound)" in result.stdout
        assert "No VM prices for region southafricanorth" in result.stdout
        assert "aksgpu prices refresh --region southafricanorth" in result.stdout


def test_a_description_past_the_bound_is_one_message_from_init_and_render(example_project: Path) -> None:
    """Every input is bounded: a description over 1,000 characters is refused by name, whether it
    comes from `init --description` (once an internal error) or from environments.yaml."""
    long = "x" * 1001
    result = runner.invoke(app, ["init", "stage", "--preset", "dev", "--location", "eastus2", "--description", long])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith('error: --description = "xxx') and "at most 1,000 characters" in result.stderr
    assert not (example_project / "stacks" / "Pulumi.stage.yaml").exists()
    environments = example_project / "stacks" / "environments.yaml"
    document = yaml.safe_load(environments.read_text())
    document["environments"]["dev"]["description"] = long
    environments.write_text(yaml.safe_dump(document))
    result = runner.invoke(app, ["render", "dev"])
    assert result.exit_code == 2, result.output
    assert "environments.dev.description" in result.stderr and "Fix: shorten it" in result.stderr
