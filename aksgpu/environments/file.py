"""stacks/environments.yaml, the authored file: per environment a preset plus overrides.

Each environment's effective cluster spec is its preset, then the shared `defaults.overrides`,
then its own `overrides`, deep-merged (see `merge`). `aksgpu render` writes that effective spec
to stacks/Pulumi.<env>.yaml; nothing else in the chain reads environments.yaml back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from aksgpu.errors import Problem, UserError, render_problems
from aksgpu.project.files import refuse_symlink_loop
from aksgpu.project.stackfile import find_project_dir, load_yaml, stack_config_dir
from aksgpu.spec.base import checked, did_you_mean, issues_from_validation_error
from aksgpu.spec.descriptions import describe_schema_properties
from aksgpu.spec.shared_fields import STACK_NAME, STACK_NAME_RULE

ENVIRONMENTS_FILE = "environments.yaml"
SCHEMA_FILE = "environments.schema.json"
# An environment's name is its stack's: a Pulumi stack name, also part of a file name (spec/shared_fields.py).
ENVIRONMENT_NAME = STACK_NAME
# In a list of named items (nodePools, teams, subnets), an override item with this key set to
# true removes the preset's item of that name instead of merging into it.
REMOVE_KEY = "_remove"
# A fleet's stacks: "<environment>" (shared), "<environment>-<member>", and "<environment>-upgrades",
# its update strategy and auto-upgrade profiles; so no member may be called "upgrades".
UPGRADES = "upgrades"

EnvironmentName = Annotated[
    str,
    checked(ENVIRONMENT_NAME.fullmatch, STACK_NAME_RULE, 'rename it, e.g. "prod"'),
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, frozen=True, strict=True,
                              json_schema_extra=describe_schema_properties, populate_by_name=True)


class Defaults(_Model):
    """Settings shared by every environment; an environment's own settings win."""

    backend: str | None = None
    """Pulumi state backend URL (file://, azblob://..., or https://api.pulumi.com). Unset: the local file backend in .pulumi-state/."""
    secrets_provider: str | None = None
    """Pulumi secrets provider (passphrase, or azurekeyvault://<vault>.vault.azure.net/keys/<key>). Unset: passphrase for the local backend, the service's own for Pulumi Cloud."""
    overrides: dict[str, Any] = Field(default_factory=dict)
    """Cluster spec fields applied to every environment, after its preset and before its own overrides."""


class FleetMemberSettings(_Model):
    """One member cluster of a fleet environment: its preset and what it changes."""

    name: str = Field(min_length=1)
    """The member's name: 1-50 lowercase letters, digits or '-'. Its stack is "<environment>-<name>"."""
    group: str = Field(min_length=1)
    """The update group the member is in (lowercase letters, digits, '-'); updateStages name groups."""
    preset: str | None = None
    """The member's preset. None: the environment's."""
    overrides: dict[str, Any] = Field(default_factory=dict)
    """Cluster spec fields of this member (e.g. name, location, resourceGroup, nodePools), on top of the environment's overrides."""


class FleetSettings(_Model):
    """A fleet: member clusters declared together, plus the parts they share (see FleetSpec)."""

    name: str | None = None
    """Name of the Fleet Manager fleet. None: the environment's name."""
    location: str | None = None
    """Region of the fleet, its registry and Azure Monitor workspace. None: the first member's region."""
    resource_group: str | None = None
    """The resource group of the fleet's shared parts. None: "rg-<fleet name>"."""
    tags: dict[str, str] | None = None
    """Tags on the shared parts. None: the environment's tags (its overrides and defaults.overrides)."""
    policy_owned_tags: list[str] | None = None
    """Tag names Azure Policy owns on the shared parts, ignored in diffs. None: the environment's policyOwnedTags (its overrides and defaults.overrides)."""
    protect: bool | None = None
    """Protect the shared parts from `pulumi destroy`. None: as the environment's overrides say."""
    hub: dict[str, Any] = Field(default_factory=dict)
    """Fleet Manager's hub (enabled, dnsPrefix, vmSize); default hubless."""
    registry: dict[str, Any] = Field(default_factory=dict)
    """The fleet's geo-replicated registry (mode create or none, name, zoneRedundancy, publicNetworkAccess, untaggedRetentionDays)."""
    log_analytics: dict[str, Any] = Field(default_factory=dict)
    """The fleet's Log Analytics workspaces (mode perRegion, single or perMember; retentionDays)."""
    prometheus: bool = True
    """One Azure Monitor workspace for the fleet's managed Prometheus."""
    update_stages: list[dict[str, Any]] | None = None
    """Stages of the update strategy (name, groups, afterStageWaitSeconds). None: one stage per group in the order the members name them, an hour's wait after each but the last."""
    auto_upgrade: list[dict[str, Any]] | None = None
    """Auto-upgrade profiles (name, channel Stable, Rapid or NodeImage, nodeImageSelection, disabled). None: "kubernetes" on Stable and "node-image" on NodeImage; [] for none."""
    members: list[FleetMemberSettings] = Field(min_length=1)
    """The member clusters; each becomes a stack of its own."""


# A description is a sentence or a paragraph for people; the bound keeps every input bounded in time.
DESCRIPTION_MAX_CHARS = 1000


class EnvironmentSettings(_Model):
    """One environment: which preset it starts from and what it changes."""

    preset: str = Field(min_length=1)
    """The preset this environment starts from (`aksgpu presets list`)."""
    description: str | None = Field(default=None, max_length=DESCRIPTION_MAX_CHARS)
    """What this environment is for, at most 1,000 characters; shown in the rendered stack file's header."""
    backend: str | None = None
    """Pulumi state backend URL for this environment; overrides defaults.backend."""
    secrets_provider: str | None = None
    """Pulumi secrets provider for this environment; overrides defaults.secretsProvider."""
    overrides: dict[str, Any] = Field(default_factory=dict)
    """Cluster spec fields that differ from the preset (camelCase, as in a stack file). Mappings merge key by key; lists of named items (nodePools, teams, subnets) merge by name, and an item with `_remove: true` drops the preset's item; other lists replace the preset's. In a fleet environment they apply to every member."""
    fleet: FleetSettings | None = None
    """Make this environment a fleet of clusters: its stack holds the shared parts (Fleet Manager, registry, workspaces), each member gets a stack "<environment>-<member>", and "<environment>-upgrades" holds the update strategy and auto-upgrade profiles (deployed after the members)."""


class EnvironmentsDocument(_Model):
    """The whole of stacks/environments.yaml."""

    defaults: Defaults = Defaults()
    """Settings shared by every environment."""
    environments: dict[EnvironmentName, EnvironmentSettings] = Field(default_factory=dict)
    """The environments, by name; each becomes the Pulumi stack of the same name."""


@dataclass(frozen=True)
class Environment:
    """One environment, resolved against the shared defaults."""

    name: str
    preset: str
    description: str | None
    overrides: dict[str, Any]
    shared_overrides: dict[str, Any]
    backend: str | None
    secrets_provider: str | None
    fleet: FleetSettings | None = None
    member_of: str | None = None  # a fleet member's stack: the fleet environment it is rendered from


@dataclass(frozen=True)
class EnvironmentsFile:
    """The parsed environments.yaml of a project (empty when the file does not exist yet)."""

    project_dir: Path
    path: Path
    document: EnvironmentsDocument
    exists: bool
    # What one command works out from this document once (a fleet's effective specs, environments/fleet.py):
    # every member of a fleet reads the whole fleet, which would otherwise be resolved once per member.
    worked_out: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def names(self) -> list[str]:
        return list(self.document.environments)

    def require(self, names: list[str]) -> None:
        """Raise the UserError of `get` for the first of `names` that is neither an environment nor a
        fleet member's stack."""
        stacks = self.stacks()
        for name in names:
            if name not in stacks:
                self.get(name)

    def get(self, name: str) -> Environment:
        settings = self.document.environments.get(name)
        if settings is None:
            known = ", ".join(self.names) or "(none yet)"
            add = f"`aksgpu init {name} --preset NAME`" if ENVIRONMENT_NAME.fullmatch(name) else "`aksgpu init`"
            raise UserError(problems=[Problem("ENVIRONMENT argument", name,
                                              f"no environment of that name in {self.relative_path}",
                                              f"{did_you_mean(name, self.names)}use one of: {known}, or add it "
                                              f"with {add}")])
        defaults = self.document.defaults
        return Environment(
            name=name,
            preset=settings.preset,
            description=settings.description,
            overrides=settings.overrides,
            shared_overrides=defaults.overrides,
            backend=settings.backend or defaults.backend,
            secrets_provider=settings.secrets_provider or defaults.secrets_provider,
            fleet=settings.fleet,
        )

    def stacks(self) -> dict[str, tuple[str, str | None]]:
        """Every stack the file renders: stack name -> (environment, fleet member or None); a fleet's
        upgrades stack has the member UPGRADES."""
        found: dict[str, tuple[str, str | None]] = {}
        for name, settings in self.document.environments.items():
            found[name] = (name, None)
            if settings.fleet is None:
                continue
            for member in [*(m.name for m in settings.fleet.members), UPGRADES]:
                found.setdefault(member_stack(name, member), (name, member))
        return found

    @property
    def relative_path(self) -> str:
        return str(self.path.relative_to(self.project_dir))


def environments_path(project_dir: Path) -> Path:
    return project_dir / stack_config_dir(project_dir) / ENVIRONMENTS_FILE


def load_environments(project_dir: Path | None = None) -> EnvironmentsFile:
    """Read and check environments.yaml; a missing file is an empty one."""
    project_dir = project_dir or find_project_dir(Path.cwd().resolve())
    path = environments_path(project_dir)
    refuse_symlink_loop(path)
    if path.exists() and not path.is_file():
        raise UserError(f"{path} is a folder, not the environments file. Fix: move it away; aksgpu keeps the "
                        "environments in a file of that name.")
    if not path.is_file():
        return EnvironmentsFile(project_dir, path, EnvironmentsDocument(), exists=False)
    raw = load_yaml(path)
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise UserError(problems=[Problem("(top level)", raw, f"{path.name} must be a YAML mapping with an "
                                          "environments: key", "start from `aksgpu init dev --preset dev`",
                                          source=path.name)])
    try:
        document = EnvironmentsDocument.model_validate(raw)
    except ValidationError as error:
        issues = issues_from_validation_error(error, raw, EnvironmentsDocument)
        # Always as a list under the file's name, one problem too: where the problems are is part of them.
        raise UserError(render_problems(path.name, issues), problems=issues, source=path.name) from None
    first_by_folded: dict[str, str] = {}
    for name in document.environments:
        first = first_by_folded.setdefault(name.casefold(), name)
        if first != name:
            raise UserError(problems=[Problem(f"environments.{name}", name, f'differs only in case from environment '
                                              f'"{first}", and their stack files would be one file on macOS and '
                                              "Windows", "rename one of them", source=path.name)])
    return EnvironmentsFile(project_dir, path, document, exists=True)


def member_stack(environment: str, member: str) -> str:
    """The stack of a fleet member: "<environment>-<member>"."""
    return f"{environment}-{member}"

