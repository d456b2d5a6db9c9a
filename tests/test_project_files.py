"""Pulumi.yaml validates against Pulumi's own project schema, and names what the program needs."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.helpers import EXAMPLE, SHARED

SCHEMA = SHARED / "specs" / "pulumi" / "project.json"
# The example's aksgpu source: a git commit on a host under example.com (reserved, RFC 2606), so
# nobody can serve code at that name; a team's project names its own (`aksgpu new --aksgpu-source`).
EXAMPLE_SOURCE = "git+https://git.example.com/platform/aksgpu@0123456789abcdef0123456789abcdef01234567"


@pytest.mark.skipif(not SCHEMA.is_file(), reason="../shared/specs/pulumi/project.json is not beside the repo")
def test_pulumi_yaml_matches_the_project_schema() -> None:
    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.Draft202012Validator(schema)
    project = yaml.safe_load((EXAMPLE / "Pulumi.yaml").read_text())
    assert list(validator.iter_errors(project)) == []
    assert list(validator.iter_errors({**project, "stackConfigDir": 5})), "the schema check can fail"


def test_pulumi_yaml_points_at_the_program_and_the_stacks() -> None:
    project = yaml.safe_load((EXAMPLE / "Pulumi.yaml").read_text())
    assert project["name"] == "gpu-clusters"
    assert project["runtime"] == {"name": "python", "options": {"toolchain": "pip", "virtualenv": ".venv"}}
    assert (EXAMPLE / project["main"]).is_file()
    assert (EXAMPLE / project["stackConfigDir"]).is_dir()
    assert list((EXAMPLE / project["stackConfigDir"]).glob("Pulumi.*.yaml"))


def test_the_example_project_is_what_aksgpu_new_writes(tmp_path: Path) -> None:
    from aksgpu.environments.initialize import InitRequest
    from aksgpu.ci.install_source import parse_source
    from aksgpu.ci.scaffold import PROJECT_FILES, new_project

    made = new_project(tmp_path / "gpu-clusters", InitRequest("dev", "dev", location="eastus2"),
                       parse_source(EXAMPLE_SOURCE, "0.1.0"), github=False)
    for name in PROJECT_FILES.values():
        assert (made.directory / name).read_text() == (EXAMPLE / name).read_text(), name
