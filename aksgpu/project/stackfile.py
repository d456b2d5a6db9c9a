"""Finding the Pulumi project and reading its stack files, with errors a person can act on."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aksgpu.errors import MISSING, Problem, UserError
from aksgpu.stack_config import CLUSTER_KEY, FLEET_KEY, FLEET_UPGRADES_KEY, SPEC_KEYS


@dataclass(frozen=True)
class StackFile:
    project_dir: Path
    path: Path
    stack: str
    config: dict[str, Any]

    @property
    def cluster(self) -> Any:
        return self.config.get(CLUSTER_KEY)

    @property
    def fleet(self) -> Any:
        """A fleet's shared stack holds `aksgpu:fleet` instead of a cluster."""
        return self.config.get(FLEET_KEY)

    @property
    def is_fleet(self) -> bool:
        return FLEET_KEY in self.config

    @property
    def fleet_upgrades(self) -> Any:
        """A fleet's upgrades stack holds `aksgpu:fleetUpgrades` (its update strategy and profiles)."""
        return self.config.get(FLEET_UPGRADES_KEY)

    @property
    def is_fleet_upgrades(self) -> bool:
        return FLEET_UPGRADES_KEY in self.config

    def source(self, key: str) -> str:
        """Where a spec under `key` comes from, as its problems name it: "aksgpu:cluster in Pulumi.dev.yaml"."""
        return f"{key} in {self.path.name}"

    def engine_config(self) -> dict[str, str]:
        """Config as the Pulumi engine hands it to a program: structured values as JSON."""
        return {key: value if isinstance(value, str) else json.dumps(value) for key, value in self.config.items()}


def find_project_dir(start: Path) -> Path:
    """The nearest folder at or above `start` that holds Pulumi.yaml."""
    for folder in [start, *start.parents]:
        if (folder / "Pulumi.yaml").is_file():
            return folder
    raise UserError(f"no Pulumi.yaml in {start} or any folder above it. Fix: run aksgpu inside the project "
                    "(the folder with Pulumi.yaml), or pass a path to a stack file inside it.")


def resolve_stack(target: str, cwd: Path | None = None) -> StackFile:
    """`target` is an environment name (stacks/Pulumi.<env>.yaml) or a path to a stack file."""
    cwd = cwd or Path.cwd()
    if not target.strip() or target.strip(".") == "":
        raise UserError(problems=[Problem("STACK argument", target, "names no stack", "pass an environment name "
                                          "(e.g. dev) or a stack file (stacks/Pulumi.dev.yaml)")])
    candidate = Path(target)
    if candidate.suffix in (".yaml", ".yml") or candidate.is_file():
        path = (cwd / candidate).resolve()
        if not path.is_file():
            raise UserError(problems=[Problem("STACK argument", target, "no stack file at that path",
                                              "check the path, or pass an environment name")])
        project_dir = find_project_dir(path.parent)
    else:
        project_dir = find_project_dir(cwd.resolve())
        stacks_dir = project_dir / stack_config_dir(project_dir)
        path = stacks_dir / f"Pulumi.{target}.yaml"
        if not path.is_file():
            known = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in stacks_dir.glob("Pulumi.*.yaml"))
            from aksgpu.spec.base import did_you_mean

            fix = (f"{did_you_mean(target, known)}use one of: {', '.join(known)}" if known else
                   "create it with `aksgpu init ENV --preset NAME`, or `aksgpu render` if environments.yaml has it")
            raise UserError(problems=[Problem("STACK argument", target,
                                              f"no stack of that name: {path.relative_to(project_dir)} does not exist",
                                              fix)])
    name = path.name
    if name in ("Pulumi.yaml", "Pulumi.yml", "environments.yaml"):
        what = "the Pulumi project file" if name.startswith("Pulumi") else "the environments file"
        raise UserError(problems=[Problem("STACK argument", target, f"{what}, not a stack file",
                                          "pass an environment name or a stacks/Pulumi.<env>.yaml file "
                                          "(`aksgpu validate` with no argument checks everything)")])
    if not (name.startswith("Pulumi.") and name.endswith((".yaml", ".yml"))):
        raise UserError(problems=[Problem("STACK argument", target, f"{path.name} is not named like a stack file",
                                          "name it Pulumi.<stack>.yaml")])
    stack = name[len("Pulumi."):].rsplit(".", 1)[0]
    return StackFile(project_dir, path, stack, _read_config(path))


def stack_config_dir(project_dir: Path) -> str:
    """The folder of the project's stack files, relative to it (Pulumi.yaml's stackConfigDir)."""
    project = load_yaml(project_dir / "Pulumi.yaml")
    if not isinstance(project, dict):
        raise UserError(problems=[Problem("(top level)", project, "Pulumi.yaml must be a YAML mapping (name:, "
                                          "runtime:, ...)", "see the Pulumi.yaml of aksgpu's repository",
                                          source=str(project_dir / "Pulumi.yaml"))])
    folder = project.get("stackConfigDir", ".")
    fix = "write stackConfigDir: stacks (or remove it to keep stack files beside Pulumi.yaml)"
    if not isinstance(folder, str) or not folder.strip() or "\0" in folder:
        raise UserError(problems=[Problem("stackConfigDir", folder, "must be a folder name", fix,
                                          source="Pulumi.yaml")])
    resolved = (project_dir / folder).resolve()
    if Path(folder).is_absolute() or not resolved.is_relative_to(project_dir.resolve()):
        raise UserError(problems=[Problem("stackConfigDir", folder, f"aksgpu keeps stack files in a folder inside "
                                          f"the project ({project_dir}), where it renders and finds them", fix,
                                          source="Pulumi.yaml")])
    if resolved.exists() and not resolved.is_dir():
        raise UserError(problems=[Problem("stackConfigDir", folder, f"{resolved} is a file, not a folder",
                                          "move the file away, or point stackConfigDir at a folder",
                                          source="Pulumi.yaml")])
    return folder


def _read_config(path: Path) -> dict[str, Any]:
    document = load_yaml(path)
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise UserError(problems=[Problem("(top level)", document, "a stack file is a YAML mapping with a config: key",
                                          "render it from environments.yaml (`aksgpu render ENV`), or start one "
                                          "with `aksgpu init ENV --preset dev`", source=path.name)])
    config = document.get("config") or {}
    if not isinstance(config, dict):
        raise UserError(problems=[Problem("config", config, "must be a mapping of keys to values",
                                          "render it from environments.yaml (`aksgpu render ENV`)",
                                          source=path.name)])
    if not set(SPEC_KEYS) & set(config):
        raise UserError(problems=[Problem(f"config.{CLUSTER_KEY}", MISSING, "a stack file holds a cluster spec",
                                          "render it from environments.yaml (`aksgpu render ENV`), or add the "
                                          f"cluster spec under config: {CLUSTER_KEY}:", source=path.name)])
    return config


# The most aksgpu reads of environments.yaml or a stack file: a real one is a few KiB, so a larger
# one is a mistake, and reading it whole would take time and memory for nothing.
MAX_YAML_BYTES = 1024 * 1024


def load_yaml(path: Path) -> Any:
    """A YAML file a person wrote, read strictly (cli.yaml_input); every problem is a UserError."""
    from aksgpu.project.files import refuse_symlink_loop
    from aksgpu.project.yaml_input import YamlProblem, decode_utf8, parse_yaml

    refuse_symlink_loop(path)
    try:
        with path.open("rb") as stream:
            data = stream.read(MAX_YAML_BYTES + 1)
    except OSError as error:
        raise UserError(f"cannot read {path}: {error.strerror}. Fix: check the path and its permissions.") from None
    if len(data) > MAX_YAML_BYTES:
        raise UserError(f"{path.name} is larger than {MAX_YAML_BYTES // 1024 // 1024} MiB, the most aksgpu reads "
                        "from a file a person writes. Fix: check that it is the file you meant; an environments "
                        "file or stack file is a few KiB.")
    try:
        return parse_yaml(decode_utf8(data))
    except YamlProblem as problem:
        raise UserError(f"{path.name} is not valid YAML: {problem}.") from None
