"""`aksgpu promote ENV`: decide from the canary's recorded verdicts and move the pins in
environments.yaml (docs/guides/promotion.md).

promote: a node pool snapshot of the canary is added to promotion.snapshots and every other GPU
pool of the canary's VM size, OS SKU, driver mode and MIG profile is pinned to it
(nodePools[].pins.nodeImageSnapshot); the canary's driver pin, where it has one, goes to those
of them with gpu.driver None. rollback:
the canary's driver pin goes back to the baseline's; its node image cannot be moved back through
a pin (AKS cannot downgrade a node image: learn.microsoft.com/azure/aks/node-image-upgrade, read
2026-11-27), so the other pools' pins stay and the canary is rolled back or recreated by hand (the
message says how). The file
is edited in place (project/yaml_edit.py: comments and order kept), under the project's lock, written
atomically, and only when the environment still validates with the change."""

from __future__ import annotations

import re
import shlex
import subprocess
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from aksgpu.environments.file import EnvironmentsDocument, EnvironmentsFile, load_environments
from aksgpu.errors import MISSING, Problem, UserError
from aksgpu.project.files import locked_for_writing, write_text_atomically
from aksgpu.project.stackfile import find_project_dir
from aksgpu.project.yaml_input import parse_yaml
from aksgpu.promotion.decision import Decision, Rules, decide, select
from aksgpu.promotion.records import Verdict
from aksgpu.project.yaml_edit import Step, set_in_text, set_value
from aksgpu.spec import ClusterSpec, NodePool

# AKS node pool version rollback restores a pool's previous Kubernetes and node image versions:
# GA with API 2026-04-01 and Azure CLI 2.88.0 (no aks-preview extension), within 7 days of the
# upgrade, one version back, and with the node OS upgrade channel off if the node image must go back
# too (learn.microsoft.com/azure/aks/roll-back-node-pool-version, read 2026-11-27). aksgpu deploys
# with 2025-09-01, so it does not call that API itself: it prints the Azure CLI command, and runs it
# with --roll-back-canary.
ROLLBACK_DOC = ("AKS node pool version rollback (learn.microsoft.com/azure/aks/roll-back-node-pool-version: "
                "Azure CLI 2.88.0 or later, within 7 days of the upgrade, with the node OS upgrade channel off), "
                "or delete the canary pool and let `aksgpu up` recreate it pinned to the baseline snapshot")


def _nodepool_commands(spec: ClusterSpec, pools: Sequence[NodePool], verb: str, *extra: str) -> list[list[str]]:
    """`az aks nodepool VERB` for each AgentPool of `pools` (a perZone pool is several)."""
    return [["az", "aks", "nodepool", verb, "--resource-group", spec.resource_group.name, "--cluster-name", spec.name,
             "--name", agent_pool.name, *extra] for pool in pools for agent_pool in pool.agent_pools()]


def rollback_commands(spec: ClusterSpec, canary: NodePool) -> list[list[str]]:
    """The Azure CLI commands that roll the canary's AgentPools back one version."""
    return _nodepool_commands(spec, [canary], "rollback")


def rollback_command(spec: ClusterSpec, canary: NodePool) -> str:
    """The same as one shell line."""
    return " && ".join(shlex.join(argv) for argv in rollback_commands(spec, canary))


def upgrade_command(spec: ClusterSpec, pools: Sequence[NodePool], snapshot: str) -> str:
    """The Azure CLI line that moves existing pools to a declared snapshot's node image: at the same
    Kubernetes version a node-image-only upgrade with the snapshot's ID (azure-aks-docs
    node-pool-snapshot.md, read 2026-11-27); a changed creationData does not (components/node_pools.py)."""
    group = spec.resource_group.name
    snapshot_id = (f"$(az aks nodepool snapshot show --resource-group {shlex.quote(group)} "
                   f"--name {shlex.quote(snapshot)} --query id -o tsv)")
    return " && ".join(shlex.join(argv) + f' "{snapshot_id}"' for argv in
                       _nodepool_commands(spec, pools, "upgrade", "--node-image-only", "--snapshot-id"))


def _gpu_kind(pool: NodePool) -> tuple[str, str, str | None, str | None]:
    gpu = pool.gpu_settings
    return (pool.vm_size, str(pool.os_sku), gpu.driver if gpu else None, gpu.mig_profile if gpu else None)


def followers(spec: ClusterSpec) -> list[NodePool]:
    """The GPU pools the canary speaks for: its VM size, OS SKU (one node image per OS SKU and
    architecture; each GPU model its own check), driver mode (AKS's driver install or the GPU
    Operator's: AKS#5869 broke the first only) and MIG profile (per-slice figures)."""
    canary = canary_pool(spec)
    return [p for p in spec.node_pools
            if p.kind == "gpu" and p.name != canary.name and _gpu_kind(p) == _gpu_kind(canary)]


def canary_pool(spec: ClusterSpec) -> NodePool:
    assert spec.promotion is not None
    return next(p for p in spec.node_pools if p.name == spec.promotion.canary_pool)


def roll_back_canary(spec: ClusterSpec,
                     run: Callable[..., subprocess.CompletedProcess[str]] | None = None) -> list[str]:
    """Run AKS's node pool version rollback on the canary's AgentPools (`aksgpu promote
    --roll-back-canary` on a rollback decision); returns the commands run. Tested against a fake
    `run` only: the Azure CLI is the boundary."""
    run = run or subprocess.run
    done = []
    for argv in rollback_commands(spec, canary_pool(spec)):
        try:
            result = run(argv, capture_output=True, text=True, check=False)
        except OSError as error:
            raise UserError(f"cannot run the Azure CLI: {error}. Fix: install the Azure CLI (2.88.0 or later) "
                            f"and sign in with `az login`, or run `{shlex.join(argv)}` yourself") from None
        if result.returncode != 0:
            lines = (result.stderr or result.stdout or "").strip().splitlines()
            raise UserError(f"`{shlex.join(argv)}` failed: {lines[-1] if lines else result.returncode}. Fix: AKS "
                            "rolls a pool back within 7 days of its upgrade, one version, with the node OS upgrade "
                            "channel off; otherwise delete the canary pool and let `aksgpu up` recreate it pinned to "
                            "the baseline snapshot")
        done.append(shlex.join(argv))
    return done


@dataclass(frozen=True)
class Change:
    """One value promote writes: where in environments.yaml, and what it was in the spec."""

    path: list[Step]
    value: str
    before: str | None
    what: str

    @property
    def field(self) -> str:
        """The spec path it sets, after the stack's overrides ("nodePools.h100a.pins.nodeImageSnapshot")."""
        rest = self.path[len(self.path) - self.path[::-1].index("overrides"):]
        return ".".join(s if isinstance(s, str) else s[1] for s in rest)


def rules_of(spec: ClusterSpec) -> Rules:
    promotion = spec.promotion
    if promotion is None:
        raise UserError(problems=[Problem(
            "promotion", MISSING,
            f"cluster {spec.name} needs a promotion section to name the canary pool to promote from",
            "add promotion: {canaryPool: <a GPU pool>} to the environment (docs/guides/promotion.md)")])
    return Rules(promotion.min_canary_nodes, promotion.min_pass_rate, promotion.gemm_tolerance,
                 promotion.bandwidth_tolerance, promotion.nccl_floor_gbps, promotion.rollback_failures)


def _agent_pools(pool: NodePool) -> set[str]:
    return {zone_pool.name for zone_pool in pool.agent_pools()}


def decide_for(spec: ClusterSpec, records: Sequence[Verdict]) -> Decision:
    """The decision for `spec`'s canary over `records` (the whole record: canary and baseline)."""
    rules = rules_of(spec)
    assert spec.promotion is not None
    canary = canary_pool(spec)
    names = _agent_pools(canary)
    pool_records = [r for r in records if r.pool in names]
    relabelled = [r if r.pool not in names else _as_pool(r, canary.name) for r in records]
    candidate, canary_records, baseline = select(relabelled, canary.name)
    # The baseline is what the pools the canary speaks for run, not every pool of its size.
    follower_pools = {agent_pool for pool in followers(spec) for agent_pool in _agent_pools(pool)}
    baseline = [r for r in baseline if r.pool in follower_pools]
    if not pool_records or not canary_records:
        return Decision("wait", (f"no verdict of the canary pool {canary.name} names its node image yet",), (), (),
                        {"canaryNodes": 0})
    return decide(canary_records, baseline, rules, candidate)


def _as_pool(record: Verdict, pool: str) -> Verdict:
    return replace(record, pool=pool)


def fleet_group(environments: EnvironmentsFile, stack: str) -> str:
    """The update group of fleet member stack `stack` (environments.yaml fleet.members[].group)."""
    environment, member = environments.stacks().get(stack, (stack, None))
    settings = environments.document.environments.get(environment)
    fleet = settings.fleet if settings else None
    group = next((m.group for m in fleet.members if m.name == member), None) if fleet and member else None
    if group is None:
        raise UserError(problems=[Problem(
            "ENVIRONMENT argument", stack, "with --update-run, a fleet member's stack, which has an update group",
            "name the canary member's stack (<fleet environment>-<member>)")])
    return group


def snapshot_name(pool: str, node_image: str) -> str:
    """A snapshot's name from the canary pool and its node image's version
    ("AKSUbuntu-2204gen2containerd-202611.10.0" -> "<pool>-202611-10-0"), within Azure's 63 characters."""
    version = re.sub(r"[^A-Za-z0-9]+", "-", node_image.rsplit("-", 1)[-1]).strip("-") or "image"
    return f"{pool}-{version}"[:63].strip("-_")


def overrides_path(environments: EnvironmentsFile, stack: str) -> list[Step]:
    """Where stack `stack`'s own overrides live in environments.yaml: an environment's, or a fleet
    member's (environments.<fleet>.fleet.members[name].overrides)."""
    environment, member = environments.stacks().get(stack, (stack, None))
    if member is None:
        return ["environments", environment, "overrides"]
    return ["environments", environment, "fleet", "members", ("name", member), "overrides"]


def changes_for(env: str, spec: ClusterSpec, decision: Decision,
                base: list[Step] | None = None) -> tuple[list[Change], list[str]]:
    """What promote writes for `decision` (nothing for wait and refuse), and what it says beside."""
    assert spec.promotion is not None
    canary = canary_pool(spec)
    # The canary's verdicts speak for its followers only: other GPU pools need a canary of their own.
    gpu_pools = [p for p in spec.node_pools if p.kind == "gpu" and p.name != canary.name]
    others = followers(spec)
    uncovered = [p.name for p in gpu_pools if p not in others]
    base = base or ["environments", env, "overrides"]
    changes: list[Change] = []
    notes: list[str] = []
    canary_driver = canary.pins.driver_version if canary.pins else None
    if decision.action == "promote":
        image = dict(decision.candidate).get("nodeImage", "")
        name = snapshot_name(canary.name, image)
        if name not in {s.name for s in spec.promotion.snapshots}:
            changes.append(Change([*base, "promotion", "snapshots", ("name", name), "sourcePool"], canary.name, None,
                                  f"snapshot {name} of pool {canary.name} (node image {image})"))
        for pool in others:
            pins = pool.pins
            if (pins.node_image_snapshot if pins else None) != name:
                changes.append(Change([*base, "nodePools", ("name", pool.name), "pins", "nodeImageSnapshot"], name,
                                      pins.node_image_snapshot if pins else None, f"pool {pool.name}: node image"))
            gpu = pool.gpu_settings
            if canary_driver and gpu is not None and gpu.driver == "None" and \
                    (pins.driver_version if pins else None) != canary_driver:
                before = pins.driver_version if pins else None
                changes.append(Change([*base, "nodePools", ("name", pool.name), "pins", "driverVersion"],
                                      canary_driver, before, f"pool {pool.name}: driver"))
        moved = [pool for pool in others if (pool.pins.node_image_snapshot if pool.pins else None) != name]
        if moved:
            notes.append(f"after `aksgpu up {env}` created snapshot {name}, move the existing nodes of "
                         f"{', '.join(p.name for p in moved)} to it (the pin alone shapes pools created from now "
                         f"on): `{upgrade_command(spec, moved, name)}`")
        if uncovered:
            notes.append(f"not moved: {', '.join(uncovered)} (another VM size, OS SKU, driver mode or MIG profile "
                         f"than the canary {canary.vm_size} {canary.os_sku}: its verdicts do not speak for them)")
        notes.append(f"`aksgpu up {env}` creates snapshot {name} from {canary.name}'s nodes as they are then: keep "
                     f"the canary on {image} until it has run (controlPlane.nodeOsUpgradeChannel None)")
    elif decision.action == "rollback":
        drivers = Counter(p.pins.driver_version for p in gpu_pools if p.pins and p.pins.driver_version)
        if canary_driver and drivers:
            baseline_driver = drivers.most_common(1)[0][0]
            if baseline_driver != canary_driver:
                changes.append(Change([*base, "nodePools", ("name", canary.name), "pins", "driverVersion"],
                                      baseline_driver, canary_driver, f"canary {canary.name}: driver back"))
        notes.append(f"the other GPU pools keep their pins. AKS cannot downgrade a node image through a pin "
                     f"(learn.microsoft.com/azure/aks/node-image-upgrade): roll the canary {canary.name} back with "
                     f"`{rollback_command(spec, canary)}`: {ROLLBACK_DOC}")
    return changes, notes


def apply(env: str, changes: list[Change], project_dir: Path | None = None,
          validate: Any = None) -> Path:
    """Write `changes` into environments.yaml under the project's lock: the text edited in place, read
    back and compared with the document with the changes set, the environment validated by
    `validate(EnvironmentsFile)` (raises on a spec error), then written atomically."""
    project_dir = project_dir or find_project_dir(Path.cwd().resolve())
    with locked_for_writing(project_dir):
        environments = load_environments(project_dir)
        text = environments.path.read_text(encoding="utf-8")
        expected = parse_yaml(text)
        for change in changes:
            text = set_in_text(text, change.path, change.value)
            expected = set_value(expected, change.path, change.value)
        if parse_yaml(text) != expected:
            raise UserError(f"could not change {environments.relative_path} without changing what else is there; "
                            "nothing was written. Fix: set the pins by hand (see `aksgpu promote --dry-run`)")
        candidate = EnvironmentsFile(environments.project_dir, environments.path,
                                     EnvironmentsDocument.model_validate(expected), exists=True)
        if validate is not None:
            validate(candidate)
        write_text_atomically(environments.path, text)
        return environments.path
