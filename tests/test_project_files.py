"""Pulumi.yaml validates against Pulumi's own project schema, and names what the program needs."""

from __future__ import annotations

import json

import jsonschema
import pytest
import yaml

from tests.helpers import REPO, SHARED

SCHEMA = SHARED / "specs" / "pulumi" / "project.json"


@pytest.mark.skipif(not SCHEMA.is_file(), reason="../shared/specs/pulumi/project.json is not beside the repo")
def test_pulumi_yaml_matches_the_project_schema() -> None:
    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.Draft202012Validator(schema)
    project = yaml.safe_load((REPO / "Pulumi.yaml").read_text())
    assert list(validator.iter_errors(project)) == []
    assert list(validator.iter_errors({**project, "stackConfigDir": 5})), "the schema check can fail"


def test_pulumi_yaml_points_at_the_program_and_the_stacks() -> None:
    project = yaml.safe_load((REPO / "Pulumi.yaml").read_text())
    assert project["name"] == "aksgpu"
    assert project["runtime"] == {"name": "python", "options": {"toolchain": "pip", "virtualenv": ".venv"}}
    assert (REPO / project["main"]).is_file()
    assert (REPO / project["stackConfigDir"]).is_dir()
    assert list((REPO / project["stackConfigDir"]).glob("Pulumi.*.yaml"))
