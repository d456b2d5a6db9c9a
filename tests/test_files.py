"""Files aksgpu writes are replaced whole; failures and Ctrl-C leave what was there, with one line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

import aksgpu.project.files
from aksgpu.cli.app import app
from aksgpu.errors import UserError
from aksgpu.errors import EXIT_INTERNAL_ERROR, EXIT_INTERRUPTED
from aksgpu.project.files import read_text_if_exists, write_text_atomically

runner = CliRunner()


def _leftovers(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir() if path.name.endswith(".tmp"))


def test_write_replaces_and_keeps_the_mode(tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    path.write_text("old\n")
    path.chmod(0o640)
    write_text_atomically(path, "new\n")
    assert path.read_text() == "new\n" and path.stat().st_mode & 0o777 == 0o640 and not _leftovers(tmp_path)


def test_a_failed_rename_leaves_the_old_file_and_no_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "a.yaml"
    path.write_text("old\n")

    def full_disk(*_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(aksgpu.project.files.os, "replace", full_disk)
    with pytest.raises(UserError, match=r"cannot write .*a.yaml: No space left on device. The file is as it was"):
        write_text_atomically(path, "new\n")
    assert path.read_text() == "old\n" and not _leftovers(tmp_path)


def test_an_interrupt_mid_write_leaves_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "a.yaml"
    path.write_text("old\n")

    def interrupted(_: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(aksgpu.project.files.os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_text_atomically(path, "new\n")
    assert path.read_text() == "old\n" and not _leftovers(tmp_path)


def test_a_folder_that_cannot_exist_is_a_user_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="cannot write .*file/out.yaml"):
        write_text_atomically(tmp_path / "file" / "out.yaml", "x")


def test_reading_non_utf8_is_a_user_error(tmp_path: Path) -> None:
    (tmp_path / "a.yml").write_bytes(b"\xff\xfe")
    with pytest.raises(UserError, match="is not UTF-8 text"):
        read_text_if_exists(tmp_path / "a.yml")
    assert read_text_if_exists(tmp_path / "missing") is None


def test_ctrl_c_during_render_prints_one_line_exits_130_and_keeps_the_stack_file(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    environments = project / "stacks" / "environments.yaml"
    environments.write_text(environments.read_text().replace("tags: {env: dev}", "tags: {env: dev2}"))
    stack = project / "stacks" / "Pulumi.dev.yaml"
    before = stack.read_bytes()

    def interrupted(_: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(aksgpu.project.files.os, "fsync", interrupted)
    result = runner.invoke(app, ["render", "dev"])
    assert result.exit_code == EXIT_INTERRUPTED
    assert result.output.strip().splitlines() == [
        "interrupted. Files aksgpu writes are replaced whole, so each is as it was or complete."]
    assert stack.read_bytes() == before and not _leftovers(stack.parent)


def test_a_write_failure_in_render_is_one_message(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    environments = project / "stacks" / "environments.yaml"
    environments.write_text(environments.read_text().replace("tags: {env: dev}", "tags: {env: dev2}"))

    def read_only(*_: object) -> None:
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(aksgpu.project.files.os, "replace", read_only)
    result = runner.invoke(app, ["render", "dev"])
    assert result.exit_code == 2 and "Read-only file system" in result.output
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)


def test_an_unforeseen_error_is_one_line_with_exit_70(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import aksgpu.environments.validation

    def broken(*_: object, **__: object) -> None:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(aksgpu.environments.validation, "validate_targets", broken)
    monkeypatch.delenv("AKSGPU_DEBUG", raising=False)
    result = runner.invoke(app, ["validate"])
    assert result.exit_code == EXIT_INTERNAL_ERROR
    assert result.output.startswith("error: internal error (ZeroDivisionError: division by zero)")
    assert len(result.output.strip().splitlines()) == 1
    monkeypatch.setenv("AKSGPU_DEBUG", "1")
    assert isinstance(runner.invoke(app, ["validate"]).exception, ZeroDivisionError)


def test_new_files_get_the_umask_mode(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        write_text_atomically(tmp_path / "new.yaml", "x")
    finally:
        os.umask(old)
    assert (tmp_path / "new.yaml").stat().st_mode & 0o777 == 0o640


def test_a_device_is_written_to_not_replaced(tmp_path: Path) -> None:
    write_text_atomically(Path("/dev/null"), "x")
    assert Path("/dev/null").is_char_device()


def test_a_symbolic_link_keeps_pointing_at_the_replaced_file(tmp_path: Path) -> None:
    (tmp_path / "real.yaml").write_text("old\n")
    (tmp_path / "link.yaml").symlink_to("real.yaml")
    write_text_atomically(tmp_path / "link.yaml", "new\n")
    assert (tmp_path / "link.yaml").is_symlink() and (tmp_path / "real.yaml").read_text() == "new\n"


def test_a_folder_where_the_file_should_be_is_a_user_error(tmp_path: Path) -> None:
    (tmp_path / "out.yaml").mkdir()
    with pytest.raises(UserError, match="cannot write .*out.yaml: it is a folder"):
        write_text_atomically(tmp_path / "out.yaml", "x")


@pytest.mark.parametrize("args", [["plan", "dev", "--bogus"], ["plan"], ["nosuchcommand"], ["ci", "nosuch"]])
def test_usage_errors_exit_2_not_as_internal_errors(args: list[str]) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "internal error" not in result.output, result.output


def test_the_cli_starts_without_click_installed() -> None:
    # click is not a dependency of aksgpu (Typer brings its own copy); the CLI must not import it.
    import subprocess
    import sys

    code = ("import sys; sys.modules['click'] = None; "
            "from typer.testing import CliRunner; from aksgpu.cli.app import app; "
            "result = CliRunner().invoke(app, ['presets', 'list']); sys.exit(result.exit_code)")
    assert subprocess.run([sys.executable, "-c", code], check=False, timeout=120).returncode == 0


def test_schema_output_never_replaces_a_file_that_is_not_a_schema(project: Path) -> None:
    environments = project / "stacks" / "environments.yaml"
    before = environments.read_bytes()
    result = runner.invoke(app, ["schema", "environments", "-o", str(environments)])
    assert result.exit_code == 2 and "is not a JSON Schema" in result.output
    assert environments.read_bytes() == before
    schema = project / "stacks" / "environments.schema.json"
    assert runner.invoke(app, ["schema", "environments", "-o", str(schema)]).exit_code == 0
    assert runner.invoke(app, ["schema", "cluster", "-o", "-"]).output.startswith("{")
    assert not (project / "-").exists()


@pytest.mark.parametrize(("args", "code"), [(["presets", "list"], 0), (["plan", "--bogus"], 2)])
def test_the_console_script_keeps_exit_codes(args: list[str], code: int) -> None:
    # main() freezes the collector before the interpreter exits; the exit code must pass through.
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", "from aksgpu.cli.app import main; main()", *args],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == code, result.stderr


def test_a_reader_that_goes_away_ends_the_command_quietly_with_141() -> None:
    import subprocess
    import sys

    process = subprocess.Popen([sys.executable, "-c", "from aksgpu.cli.app import main; main()", "policy", "list"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # like `| head` exiting before aksgpu writes
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=120) == 141
    assert stderr == "", "no internal error, no traceback"
