"""The pool's capacityReservations against maxCount plus upgrade surge (spec/reservation_checks.py)."""

from __future__ import annotations

from typing import Any

import pytest

from aksgpu.spec import SpecError, parse_cluster_spec
from aksgpu.spec.reservation_checks import reservation_needs
from tests.helpers import base_spec, edit

CRG = ("/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg-capacity/providers/"
       "Microsoft.Compute/capacityReservationGroups/crg-a100")


def _spec(**pool: Any) -> dict[str, Any]:
    spec = base_spec()
    return edit(spec, "nodePools.0", {**spec["nodePools"][0], "zones": ["1"], "maxCount": 8,
                                       "capacityReservationGroupId": CRG, **pool})


def _problems(spec: dict[str, Any]) -> list[Any]:
    try:
        return parse_cluster_spec(spec)[1]
    except SpecError as error:
        return list(error.problems)


def test_a_spec_without_reservations_validates_as_before() -> None:
    spec, _ = parse_cluster_spec(base_spec())
    assert spec.node_pools[0].capacity_reservations == {}


def test_a_reservation_below_max_count_plus_surge_is_an_error_naming_the_field() -> None:
    # maxCount 8, AKS's default surge 10% of 8 = 0.8, rounded up: 1 -> 9 nodes in zone 1.
    with pytest.raises(SpecError) as raised:
        parse_cluster_spec(_spec(capacityReservations={"1": 8}))
    [problem] = [p for p in raised.value.problems if "capacityReservations" in p.path]
    assert problem.path == "nodePools[0].capacityReservations.1" and problem.value == 8
    assert "9 nodes" in problem.rule and "reserve at least 9" in problem.fix and problem.severity == "error"
    assert not [p for p in _problems(_spec(capacityReservations={"1": 9})) if "capacityReservations" in p.path]


def test_surge_is_a_count_or_a_percentage_rounded_up() -> None:
    spec, _ = parse_cluster_spec(_spec(capacityReservations={"1": 12}, upgrade={"maxSurge": "33%"}))
    assert reservation_needs(spec.node_pools[0]) == {"1": 11}  # 8 + ceil(2.64)
    spec, _ = parse_cluster_spec(_spec(capacityReservations={"1": 12}, upgrade={"maxSurge": "3"}))
    assert reservation_needs(spec.node_pools[0]) == {"1": 11}


def test_zones_per_zone_and_regional_pools() -> None:
    per_zone, _ = parse_cluster_spec(_spec(zones=["1", "2"], perZone=True, capacityReservations={"1": 9, "2": 9}))
    assert reservation_needs(per_zone.node_pools[0]) == {"1": 9, "2": 9}
    spread = _spec(zones=["1", "2"], capacityReservations={"1": 4, "2": 4})  # 9 nodes over 2 zones: 8 < 9
    [problem] = [p for p in _problems(spread) if "capacityReservations" in p.path]
    assert problem.path == "nodePools[0].capacityReservations" and problem.severity == "error"
    uneven = [p for p in _problems(_spec(zones=["1", "2"], capacityReservations={"1": 9, "2": 1}))
              if "capacityReservations" in p.path]
    assert [(p.path, p.severity) for p in uneven] == [("nodePools[0].capacityReservations.2", "warning")]
    regional, _ = parse_cluster_spec(_spec(zones=[], capacityReservations={"regional": 9}))
    assert reservation_needs(regional.node_pools[0]) == {"regional": 9}


def test_reservations_without_a_group_are_an_error() -> None:
    spec = edit(_spec(capacityReservations={"1": 9}), "nodePools.0.capacityReservationGroupId", None)
    [problem] = [p for p in _problems(spec) if "capacityReservations" in p.path]
    assert "capacityReservationGroupId" in problem.fix and problem.severity == "error"


def test_a_bad_zone_or_count_names_the_field() -> None:
    for bad in ({"4": 9}, {"1": -1}):
        with pytest.raises(SpecError) as raised:
            parse_cluster_spec(_spec(capacityReservations=bad))
        assert any(p.path.startswith("nodePools[0].capacityReservations") for p in raised.value.problems)
