"""A team's GPU quota larger than one InfiniBand domain is a warning naming the field, with gang
scheduling (Kueue podsets) and without it (the scheduler places each pod on its own)."""

from __future__ import annotations

from typing import Any

from aksgpu.spec import parse_cluster_spec
from tests.helpers import base_spec, edit

H100 = {"name": "h100", "kind": "gpu", "vmSize": "Standard_ND96isr_H100_v5", "zones": ["1"], "count": 4,
        "team": "research", "gpu": {"driver": "None"}, "labels": {"aksgpu.io/ib-domain": "h100"}}
SECOND = {**H100, "name": "h100b", "zones": ["2"], "labels": {"aksgpu.io/ib-domain": "h100b"}}


def _spec(*pools: dict[str, Any], gang: bool, quota: int | None = None) -> dict[str, Any]:
    team: dict[str, Any] = {"name": "research", **({"quota": {"gpus": quota}} if quota is not None else {})}
    spec = edit(edit(base_spec(), "nodePools", list(pools)), "access.teams", [team])
    return edit(edit(spec, "gangScheduling", {"enabled": gang}), "controlPlane.kubernetesVersion", "1.34")


def _warned(spec: dict[str, Any]) -> list[Any]:
    return [i for i in parse_cluster_spec(spec)[1] if i.path == "access.teams[0].quota.gpus"]


def test_without_gang_scheduling_a_quota_over_one_domain_is_warned() -> None:
    [issue] = _warned(_spec(H100, SECOND, gang=False))  # 2 domains of 32 GPUs, quota 64 by default
    assert issue.severity == "warning" and issue.value == 64
    assert "largest 32 GPUs" in issue.rule and "scheduler places each pod on its own" in issue.rule
    assert "gangScheduling.enabled: true" in issue.fix
    assert not _warned(_spec(H100, SECOND, gang=False, quota=32)), "a quota that fits one domain"
    assert not _warned(_spec(H100, gang=False)), "one domain the quota cannot exceed"


def test_with_gang_scheduling_the_warning_names_kueue_podsets() -> None:
    [issue] = _warned(_spec(H100, SECOND, gang=True))
    assert "podset-group-name" in issue.fix
