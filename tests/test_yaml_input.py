"""The strict YAML reader: every kind of broken or surprising input is a located problem."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from aksgpu.cli.app import app
from aksgpu.project.yaml_input import MAX_DEPTH, YamlProblem, decode_utf8, parse_yaml

runner = CliRunner()


def _problem(text: str) -> YamlProblem:
    with pytest.raises(YamlProblem) as caught:
        parse_yaml(text)
    return caught.value


def test_duplicate_key_names_both_lines() -> None:
    problem = _problem("environments:\n  prod:\n    preset: training\n  prod:\n    preset: dev\n")
    assert (problem.line, problem.column) == (4, 3)
    assert 'the key "prod" appears twice' in problem.rule and "first at line 2" in problem.rule


def test_duplicate_key_in_flow_mapping() -> None:
    assert "appears twice" in _problem("{a: 1, a: 2}").rule


def test_merge_keys_may_be_overridden() -> None:
    assert parse_yaml("base: &b {x: 1, y: 1}\nc:\n  <<: *b\n  x: 2\n")["c"] == {"x": 2, "y": 1}


@pytest.mark.parametrize("number", [".nan", ".NaN", ".inf", "-.inf", "+.Inf"])
def test_non_finite_numbers(number: str) -> None:
    problem = _problem(f"spotMaxPrice: {number}\n")
    assert problem.rule == f"{number} is not a finite number" and problem.column == 15


def test_quoted_nan_is_text() -> None:
    assert parse_yaml('x: ".nan"') == {"x": ".nan"}


@pytest.mark.parametrize("tag", ["!!set {a}", "!!binary aGk=", "!!omap [{a: 1}]", "!!pairs [{a: 1}]",
                                 "!!python/object/apply:os.system [echo]", "!custom x", "!!null 5", "!!bool maybe",
                                 "!!float abc", "!!map [a]", "!!int '2'", "!!timestamp 2025-01-01"])
def test_explicit_tags_other_than_str_are_refused_where_written(tag: str) -> None:
    problem = _problem(f"a: 1\ntags: {tag}\n")
    assert f"the tag {tag.split()[0]} is not read here" in problem.rule and (problem.line, problem.column) == (2, 7)


def test_the_str_tag_keeps_text_text() -> None:
    assert parse_yaml("a: !!str 1\nb: !!str true") == {"a": "1", "b": "true"}


def test_a_second_merge_key_in_one_mapping() -> None:
    problem = _problem("x: &x {a: 1}\ny: &y {b: 2}\nz:\n  <<: *x\n  <<: *y\n")
    assert "second merge key" in problem.rule and problem.line == 5


def test_an_alias_inside_its_own_anchor() -> None:
    problem = _problem("a: &a [1, *a]\n")
    assert "refers to a value that contains it" in problem.rule and (problem.line, problem.column) == (1, 11)


def test_aliases_that_nest_past_the_limit() -> None:
    lines = ["a0: &a0 [x]"] + [f"a{i}: &a{i} [*a{i - 1}]" for i in range(1, 80)]
    assert "once aliases are expanded, values are nested more than" in _problem("\n".join(lines)).rule


def test_text_that_is_not_characters() -> None:
    # What Python makes of bytes that are not UTF-8 in a command-line argument (--set).
    problem = _problem("tier: Prem\udcffium")
    assert (problem.line, problem.column) == (1, 11) and "not a character" in problem.rule


def test_timestamps_stay_text() -> None:
    assert parse_yaml("start: 2025-01-31\n") == {"start": "2025-01-31"}


def test_lone_surrogate() -> None:
    problem = _problem('tags: {team: "ml\\ud800"}\n')
    # libyaml refuses the escape itself; pure-Python PyYAML builds the string and aksgpu refuses it.
    assert problem.line == 1 and "escape" in problem.fix


def test_very_long_integer() -> None:
    assert "too long" in _problem("count: " + "9" * 5000).rule


@pytest.mark.parametrize("text", ["[" * 1000 + "]" * 1000, "{a: " * 1000 + "1" + "}" * 1000,
                                  "".join("  " * level + "a:\n" for level in range(1000))])
def test_deep_nesting(text: str) -> None:
    assert f"nested more than {MAX_DEPTH} levels" in _problem(text).rule


def test_alias_expansion_bomb() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    assert "expand to more than" in _problem("\n".join(lines)).rule


def test_unclosed_quote_is_reported_where_it_opens() -> None:
    problem = _problem('name: "gpu-prod\nlocation: eastus2\ntags: {}\n')
    assert (problem.line, problem.column) == (1, 7)
    assert "close the quote" in problem.fix and "at line 4" in problem.rule


def test_not_utf8_names_line_and_column() -> None:
    with pytest.raises(YamlProblem) as caught:
        decode_utf8(b"a: 1\nname: caf\xe9\n")
    assert (caught.value.line, caught.value.column) == (2, 10) and "0xe9" in caught.value.rule


def _project(tmp_path: Path, environments: bytes) -> Path:
    (tmp_path / "Pulumi.yaml").write_text("name: x\nruntime: python\nstackConfigDir: stacks\n")
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "environments.yaml").write_bytes(environments)
    return tmp_path


@pytest.mark.parametrize("content", [
    b"environments:\n  dev: {preset: dev}\n  dev: {preset: training}\n",
    b"environments:\n  dev: {preset: d\xff\xfe}\n",
    b"environments: !!set {dev}\n",
    b"[" * 5000,
])
def test_cli_reports_broken_environments_file_without_traceback(tmp_path: Path, content: bytes,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(_project(tmp_path, content))
    for command in (["validate"], ["render"], ["render", "--check"], ["diff", "dev", "prod"]):
        result = runner.invoke(app, command)
        assert result.exit_code == 2, (command, result.output)
        assert "environments.yaml is not valid YAML: line" in result.output and result.exception is not None
        assert isinstance(result.exception, SystemExit)


@pytest.mark.parametrize("project_file", ["name: x\nruntime: python\nstackConfigDir: 5\n", "[a, b]\n", ""])
def test_a_broken_pulumi_yaml_is_one_message(tmp_path: Path, project_file: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    project = _project(tmp_path, b"environments: {}\n")
    (project / "Pulumi.yaml").write_text(project_file)
    monkeypatch.chdir(project)
    result = runner.invoke(app, ["validate"])
    assert result.exit_code == 2 and "Pulumi.yaml" in result.output and "Fix:" in result.output


def test_a_second_document_is_reported_where_it_starts() -> None:
    problem = _problem("a: 1\n---\nb: 2\n")
    assert problem.line == 2 and "second YAML document" in problem.rule


def test_a_control_character_is_located() -> None:
    problem = _problem("x: 1\nname: gpu\x00prod\n")
    assert (problem.line, problem.column) == (2, 10) and "U+0000 is a control character" in problem.rule


@pytest.mark.parametrize(("config_dir", "message"), [
    ("/etc", "a folder inside the project"), ("../outside", "a folder inside the project"),
    ('"a\\0b"', "must be a folder name"), ("Pulumi.yaml", "is a file, not a folder"),
])
def test_a_stack_config_dir_aksgpu_cannot_use_is_one_message(tmp_path: Path, config_dir: str, message: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    project = _project(tmp_path, b"environments: {}\n")
    (project / "Pulumi.yaml").write_text(f"name: x\nruntime: python\nstackConfigDir: {config_dir}\n")
    monkeypatch.chdir(project)
    for command in (["validate"], ["render"], ["plan", "dev"],
                    ["init", "qa", "--preset", "dev", "--location", "eastus2"]):
        result = runner.invoke(app, command)
        assert result.exit_code == 2 and message in result.output, (command, result.output)
    assert not (tmp_path.parent / "outside").exists()


def test_a_folder_where_environments_yaml_should_be(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = _project(tmp_path, b"")
    (project / "stacks" / "environments.yaml").unlink()
    (project / "stacks" / "environments.yaml").mkdir()
    monkeypatch.chdir(project)
    result = runner.invoke(app, ["validate"])
    assert result.exit_code == 2 and "is a folder, not the environments file" in result.output


@pytest.mark.parametrize(("text", "written"), [("true: 1", "true"), ("5: x", "5"), ("~: x", "~"), ("1.5: x", "1.5")])
def test_keys_are_names(text: str, written: str) -> None:
    problem = _problem(f"tags:\n  {text}\n")
    assert f"the key {written} reads as" in problem.rule and (problem.line, problem.column) == (2, 3)
    assert f'quote it: "{written}"' == problem.fix


def test_plain_scalars_read_as_yaml_1_2_like_pulumi_reads_them() -> None:
    document = parse_yaml("a: yes\nb: off\nc: 1:30\nd: 010\ne: 0x1F\nf: 1e3\ng: 1_000\nh: True\n")
    assert document == {"a": "yes", "b": "off", "c": "1:30", "d": 10, "e": 31, "f": 1000.0, "g": "1_000", "h": True}
