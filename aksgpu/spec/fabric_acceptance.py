"""Cross-node acceptance of new InfiniBand nodes: the floor each VM size's pairing must reach.

Facts from aksgpu/catalog/fabric_acceptance.yaml (Azure's published NCCL all-reduce
thresholds per ND size, each with its source); the NCCL environment of a size is fabric.yaml's
(`fabric_profile`). `acceptance_floor(vm_size)` is the one way in.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from aksgpu import catalog

TABLE = "fabric_acceptance"


@dataclass(frozen=True)
class AcceptanceFloor:
    """What a pairing of new nodes of one VM size must reach: NCCL all-reduce bus bandwidth (GB/s,
    nccl-tests' busbw) at one message size."""

    vm_size: str
    floor_gbs: float
    """Below it the pairing fails (Azure's 'file a Guest Health Report' line)."""
    message_bytes: int
    warn_gbs: float | None
    """Below it a pass carries a warning (Azure's warn line), where Azure publishes one."""
    expected_gbs: float | None
    nccl_env: dict[str, str] = field(default_factory=dict)
    """NCCL settings the measurement needs on top of the size's fabric profile (GB300: InfiniBand only)."""
    source: str = ""

    def as_settings(self) -> dict[str, Any]:
        """The floor as the in-cluster program reads it (fabric_decision.Floor.parse)."""
        return {"floorGBs": self.floor_gbs, "messageBytes": self.message_bytes, "warnGBs": self.warn_gbs}


def acceptance_table() -> dict[str, Any]:
    return catalog.load(TABLE)


@functools.cache
def _floors() -> dict[str, AcceptanceFloor]:
    table = acceptance_table()
    sources = table["source"]
    floors = {}
    for vm_size, facts in table["floors"].items():
        source = str(facts["source"])
        floors[vm_size] = AcceptanceFloor(
            vm_size=vm_size, floor_gbs=float(facts["floorGBs"]), message_bytes=int(facts["messageBytes"]),
            warn_gbs=None if facts.get("warnGBs") is None else float(facts["warnGBs"]),
            expected_gbs=None if facts.get("expectedGBs") is None else float(facts["expectedGBs"]),
            nccl_env={str(k): str(v) for k, v in (facts.get("ncclEnv") or {}).items()},
            source=sources.get(source, source))
    return floors


def acceptance_floor(vm_size: str) -> AcceptanceFloor | None:
    """The acceptance floor of an InfiniBand VM size, or None where Azure publishes none."""
    return _floors().get(vm_size)


def acceptance_floors() -> dict[str, AcceptanceFloor]:
    return dict(_floors())


def unpublished_sizes() -> list[str]:
    """InfiniBand sizes without a published figure: their pools are not held for acceptance."""
    return list(acceptance_table().get("unpublished") or [])


def acceptance_image() -> str:
    image = acceptance_table()["image"]
    return catalog.image_reference("ngcPytorch", str(image["tag"]))


def measure_settings() -> dict[str, int]:
    measure = acceptance_table()["measure"]
    return {"warmup": int(measure["warmupIterations"]), "iterations": int(measure["iterations"])}
