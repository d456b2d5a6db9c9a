"""The offline plan of a fleet: its shared stack, then each member and the upgrades stack with the
shared stack's outputs as their stack references read them, and what only the whole fleet shows
(members, team GPU quotas, update stages, totals, quota per region, cost, deploy time)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aksgpu.environments.file import UPGRADES
from aksgpu.errors import MISSING, Problem, UserError
from aksgpu.plan.planner import Plan
from aksgpu.plan.review import Review, Stacks, review
from aksgpu.project.stackfile import StackFile
from aksgpu.spec import ClusterSpec, Issue, SpecError, parse_cluster_spec
from aksgpu.spec.fleet import FleetSpec, FleetUpgradesSpec, parse_fleet_spec, parse_fleet_upgrades_spec
from aksgpu.stack_config import CLUSTER_KEY, FLEET_KEY, FLEET_UPGRADES_KEY
from aksgpu.policy.engine import PolicyReport
from aksgpu.preflight.cost import CostEstimate, Scale

if TYPE_CHECKING:
    from aksgpu.plan.preflight_report import CapacitySection

UP_PARALLEL = 4  # `aksgpu up FLEET --parallel`'s default


class _Reviewed:
    """The policy report and cost of a stack's review (a member's, or a fleet's shared stack)."""

    review: Review

    @property
    def policy(self) -> PolicyReport:
        return self.review.policy

    @property
    def cost(self) -> CostEstimate:
        cost = self.review.cost
        assert cost is not None  # a cluster's review, and a fleet's shared stack's, has a cost
        return cost


@dataclass
class MemberPlan(_Reviewed):
    stack_file: StackFile
    spec: ClusterSpec
    warnings: list[Issue]
    review: Review

    @property
    def plan(self) -> Plan:
        return self.review.plan


@dataclass
class FleetPlan(_Reviewed):
    stack_file: StackFile
    spec: FleetSpec
    warnings: list[Issue]
    review: Review
    upgrades_spec: FleetUpgradesSpec
    upgrades_review: Review
    members: list[MemberPlan] = field(default_factory=list)

    @property
    def shared(self) -> Plan:
        return self.review.plan

    @property
    def upgrades(self) -> Plan:
        return self.upgrades_review.plan

    @property
    def failed(self) -> bool:
        return self.policy.failed or any(member.policy.failed for member in self.members)

    @property
    def plans(self) -> list[Plan]:
        """Every stack's plan, in deploy order: shared, members, upgrades."""
        return [self.shared, *(member.plan for member in self.members), self.upgrades]


def load_fleet(stack_file: StackFile) -> tuple[FleetSpec, list[Issue]]:
    return parse_fleet_spec(stack_file.fleet, source=stack_file.source(FLEET_KEY))


def plan_fleet(stack_file: StackFile, members: list[str] | None = None, stacks: Stacks | None = None,
               progress: Callable[[int, int], None] | None = None) -> FleetPlan:
    """Plan and review the shared stack, the upgrades stack and the members (all, or those named by
    member name or stack), each stack file resolved and planned once (through `stacks`), on the
    machine's cores (`progress(done, total)` as plans finish)."""
    from aksgpu.preflight.tables import price_table

    stacks = stacks or Stacks()
    spec, warnings = load_fleet(stack_file)
    wanted = set(members or [])
    ahead = [f"{stack_file.stack}-{UPGRADES}", *(member.stack for member in spec.members
                                                 if not wanted or member.name in wanted or member.stack in wanted)]
    stacks.plan_ahead([stack_file, *_resolved(stacks, ahead, stack_file)], shared=stack_file, progress=progress)
    shared = stacks.plan(stack_file, stack_outputs={})
    upgrades_file = stacks.resolve(f"{stack_file.stack}-{UPGRADES}", cwd=stack_file.project_dir)
    if not upgrades_file.is_fleet_upgrades:
        raise UserError(problems=[Problem(f"config.{FLEET_UPGRADES_KEY}", MISSING, "a fleet's upgrades stack file "
                                          "holds its update strategy", "render the fleet environment (`aksgpu render`)",
                                          source=upgrades_file.path.name)])
    upgrades_spec, _ = parse_fleet_upgrades_spec(upgrades_file.fleet_upgrades,
                                                 source=upgrades_file.source(FLEET_UPGRADES_KEY))
    upgrades = stacks.plan(upgrades_file, stack_outputs={stack_file.stack: shared.outputs})
    prices = price_table(stack_file.project_dir)
    result = FleetPlan(stack_file, spec, warnings, review(shared, spec, prices=prices), upgrades_spec,
                       review(upgrades, upgrades_spec))
    for member in spec.members:
        if wanted and member.name not in wanted and member.stack not in wanted:
            continue
        member_file = stacks.resolve(member.stack, cwd=stack_file.project_dir)
        source = member_file.source(CLUSTER_KEY)
        member_spec, member_warnings = parse_cluster_spec(member_file.cluster, source=source)
        if member_spec.fleet is None or member_spec.fleet.stack != stack_file.stack:
            raise SpecError([Issue("fleet", None if member_spec.fleet is None else member_spec.fleet.stack,
                                   f"fleet {stack_file.stack} lists this stack as member {member.name}",
                                   "render the fleet environment again (`aksgpu render`)")], source)
        plan = stacks.plan(member_file, stack_outputs={stack_file.stack: shared.outputs})
        result.members.append(MemberPlan(member_file, member_spec, member_warnings,
                                         review(plan, member_spec, prices=prices)))
    return result


def _resolved(stacks: Stacks, names: list[str], stack_file: StackFile) -> list[StackFile]:
    """The stack files of `names` beside `stack_file` that resolve (plan_fleet reports the others)."""
    found = []
    for name in names:
        try:
            found.append(stacks.resolve(name, cwd=stack_file.project_dir))
        except UserError:
            continue
    return found


# --- what only the whole fleet shows ---------------------------------------------------------


def fleet_facts(fleet: FleetPlan, parallel: int = UP_PARALLEL) -> dict[str, Any]:
    """Members, update stages, totals, quota per region, cost and deploy time of the fleet (members
    deployed `parallel` at a time, as `aksgpu up` does by default)."""
    from aksgpu.plan.report import global_names_of, summary
    from aksgpu.spec import team_gpu_quota
    from aksgpu.preflight.quota import quota_needs

    spec = fleet.spec
    members = []
    gpus_by_model: Counter[str] = Counter()
    quota: dict[tuple[str, str], list[int]] = {}
    member_seconds = []
    monthly = Scale.flat(0.0)
    complete = fleet.cost.complete
    teams: dict[str, dict[str, int]] = {}
    for member in fleet.members:
        facts = summary(member.plan)
        for team in member.spec.access.teams:
            teams.setdefault(team.name, {})[member.stack_file.stack] = team_gpu_quota(member.spec, team)
        for pool in member.spec.all_pools:
            size = pool[1].size
            if size and size.gpu_model:
                gpus_by_model[size.gpu_model] += pool[1].max_nodes * pool[1].zone_pool_count * size.gpus
        for need in quota_needs(member.spec):
            totals = quota.setdefault((need.region, need.counter), [0, 0])
            totals[0] += need.vcpus_min
            totals[1] += need.vcpus_max
        seconds = member.review.deploy_time.schedule.total
        member_seconds.append(seconds)
        monthly = monthly + member.cost.monthly
        complete = complete and member.cost.complete
        summary_member = next(m for m in spec.members if m.stack == member.stack_file.stack)
        members.append({
            "name": summary_member.name, "stack": member.stack_file.stack, "cluster": member.spec.name,
            "location": member.spec.location, "group": summary_member.group,
            "resources": facts["resourceCount"], "maxNodes": member.spec.total_max_nodes, "maxGpus": facts["maxGpus"],
            "policyFailing": len(member.policy.problems()), "deployMinutes": round(seconds / 60),
            "monthly": member.cost.monthly.json(0), "costComplete": member.cost.complete,
        })
    shared_seconds = fleet.review.deploy_time.schedule.total
    members_seconds = _makespan(member_seconds, parallel)
    upgrades_seconds = fleet.upgrades_review.deploy_time.schedule.total
    monthly = monthly + fleet.cost.monthly
    by_group: dict[str, list[Any]] = {m["group"]: [] for m in members}
    for m in members:
        by_group[m["group"]].append(m["name"])
    return {
        "fleet": spec.name, "location": spec.location, "hub": spec.hub.enabled,
        "members": members,
        "updateStages": [{"name": stage.name, "groups": {group: by_group.get(group, []) for group in stage.groups},
                          "afterStageWaitSeconds": stage.after_stage_wait_seconds}
                         for stage in fleet.upgrades_spec.update_stages],
        "autoUpgrade": [profile.model_dump(mode="json", by_alias=True) for profile in fleet.upgrades_spec.auto_upgrade],
        "teamGpuQuotas": teams,
        "totals": {"members": len(members), "maxNodes": sum(m["maxNodes"] for m in members),
                   "maxGpus": sum(m["maxGpus"] for m in members), "gpusByModel": dict(sorted(gpus_by_model.items()))},
        "quotaByRegion": [{"region": region, "counter": counter, "vcpusMin": low, "vcpusMax": high}
                          for (region, counter), (low, high) in sorted(quota.items())],
        # Names unique across all of Azure, by stack (the shared registry, members' registries and vaults).
        "globalNames": {stack: found for stack, found in (
            (fleet.stack_file.stack, global_names_of(fleet.shared)),
            *((member.stack_file.stack, global_names_of(member.plan)) for member in fleet.members)) if found},
        "cost": {"monthly": monthly.json(0), "complete": complete, "shared": fleet.cost.json()},
        # Members deploy once the shared stack is up (they read its outputs), `parallel` at a time.
        "deployTime": {"sharedSeconds": shared_seconds, "slowestMemberSeconds": max(member_seconds, default=0),
                       "membersSeconds": members_seconds, "upgradesSeconds": upgrades_seconds,
                       "totalSeconds": shared_seconds + members_seconds + upgrades_seconds, "parallel": parallel,
                       "order": f"the shared stack, then the members, {parallel} at a time (`aksgpu up --parallel`), "
                                "then the upgrades stack"},
    }


def fleet_lines(facts: dict[str, Any]) -> list[str]:
    """The fleet section of `aksgpu plan FLEET`."""
    from aksgpu.preflight.cost_report import scale_text

    hub = "with a hub (placement, managed namespaces)" if facts["hub"] else "hubless (staged upgrades only)"
    lines = [f"Fleet {facts['fleet']} in {facts['location']}, {hub}: {facts['totals']['members']} members."]
    rows = [[m["stack"], m["cluster"], m["location"], m["group"], str(m["maxNodes"]), str(m["maxGpus"]),
             str(m["resources"]), f"{m['deployMinutes']} min",
             scale_text(_scale(m["monthly"])) + ("" if m["costComplete"] else " (prices missing)"),
             "ok" if not m["policyFailing"] else f"{m['policyFailing']} failing"] for m in facts["members"]]
    header = ["member stack", "cluster", "region", "group", "max nodes", "max GPUs", "resources", "deploy",
              "per month (min / typical / max)", "policy"]
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    lines += ["  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
              for row in [header, *rows]]
    totals = facts["totals"]
    models = ", ".join(f"{count} {model}" for model, count in totals["gpusByModel"].items()) or "none"
    lines += [f"  At full scale: {totals['maxNodes']} nodes, {totals['maxGpus']} GPUs ({models})."]
    for team, quotas in facts["teamGpuQuotas"].items():
        split = ", ".join(f"{stack} {gpus}" for stack, gpus in quotas.items())
        lines.append(f"  Team {team}'s GPU quota per member: {split} (fleet total {sum(quotas.values())}).")
    lines += ["", "Update strategy (stages one after another; groups in a stage in parallel; a group's members one "
                  "by one):"]
    for stage in facts["updateStages"]:
        groups = ", ".join(f"group {group} ({', '.join(names) or 'no member'})"
                           for group, names in stage["groups"].items())
        wait = f", then wait {_duration(stage['afterStageWaitSeconds'])}" if stage["afterStageWaitSeconds"] else ""
        lines.append(f"  stage {stage['name']}: {groups}{wait}")
    profiles = ", ".join(f"{p['name']} ({p['channel']}{', disabled' if p['disabled'] else ''})"
                         for p in facts["autoUpgrade"]) or "none: start update runs by hand"
    lines.append(f"  Auto-upgrade profiles: {profiles}.")
    if facts["globalNames"]:
        names = "; ".join(f"{stack}: {', '.join(found)}" for stack, found in facts["globalNames"].items())
        lines += ["", f"Global names (unique across Azure, so another subscription or tenant may hold one): {names}. "
                      "A name taken elsewhere fails `aksgpu up`: set fleet.registry.name, or a member's registry.name "
                      "or security.kms.keyVaultName."]
    lines += ["", "vCPU quota per region, all members (min scale / full scale with upgrade surge):"]
    lines += [f"  {q['region']:<16} {q['counter']:<40} {q['vcpusMin']:>7} / {q['vcpusMax']}"
              for q in facts["quotaByRegion"]]
    cost = facts["cost"]
    lower = "" if cost["complete"] else " (prices missing: a lower bound; see each member's plan)"
    lines += ["", f"Cost of the fleet, members and shared parts: {scale_text(_scale(cost['monthly']))} per month at "
                  f"min / typical / max scale{lower}."]
    deploy = facts["deployTime"]
    lines.append(f"Deploy time of a first `aksgpu up`: about {round(deploy['totalSeconds'] / 60)} min "
                 f"({deploy['order']}: shared {round(deploy['sharedSeconds'] / 60)} min, members "
                 f"{round(deploy['membersSeconds'] / 60)} min, the slowest one "
                 f"{round(deploy['slowestMemberSeconds'] / 60)} min, "
                 f"upgrades {round(deploy['upgradesSeconds'] / 60)} min).")
    return lines


def fleet_capacity(fleet: FleetPlan) -> dict[str, CapacitySection]:
    """Each member's capacity section, as `aksgpu plan STACK` shows it for the member's stack: from
    its own checked-in verdict history (stacks/verdicts/<member stack>.jsonl), in member order."""
    from aksgpu.plan.preflight_report import capacity_section

    return {member.stack_file.stack: capacity_section(member.spec, member.stack_file.project_dir,
                                                      member.stack_file.stack) for member in fleet.members}


def fleet_capacity_lines(sections: dict[str, CapacitySection]) -> list[str]:
    """The capacity sections of the members with GPU pools, each headed by its member stack."""
    return [line for stack, section in sections.items()
            for line in section.lines(f"Capacity of the GPU pools of member {stack}")]


def _makespan(seconds: list[int], parallel: int) -> int:
    """When the last of these runs ends, `parallel` at a time, each started as soon as a slot frees
    (longest first, as a fair stand-in for the order `aksgpu up` gives them)."""
    slots = [0] * max(1, parallel)
    for duration in sorted(seconds, reverse=True):
        slots[slots.index(min(slots))] += duration
    return max(slots)


def _duration(seconds: int) -> str:
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    return f"{seconds // 60} min" if seconds % 60 == 0 else f"{seconds} s"


def _scale(values: dict[str, float]) -> Scale:
    return Scale(values["min"], values["typical"], values["max"])
