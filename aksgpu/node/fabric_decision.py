"""What the cross-node acceptance measured and what it decides from it (fabric_acceptance.py runs
the pass): the all-reduce's result (aksgpu's program, fabric_allreduce.py, or nccl-tests'
all_reduce_perf table) read into a Measurement, judged against the VM size's floor, the results a
node carries in its annotation, the decision per node (passed, failed, released, or wait), and the
pairing of waiting nodes with each other and with known-good peers. Pure functions, no API calls.

Standard library only: shipped beside fabric_acceptance.py as a key of its ConfigMap."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

try:  # in the package (tests, the Pulumi program)
    from aksgpu.node import node_api
except ImportError:  # in the cluster: the gate's node_api.py is a sibling file
    import node_api  # type: ignore[no-redef,import-not-found]

RESULTS_ANNOTATION = "aksgpu.io/gpu-health-acceptance-results"
RESULT_PREFIX = "aksgpu-fabric-acceptance"  # the all-reduce program's result line (fabric_allreduce.py)


# --- what a run measured ---------------------------------------------------------------------


@dataclass(frozen=True)
class Measurement:
    """One all-reduce run: bus bandwidth (GB/s, nccl-tests' definition) at one message size."""

    busbw_gbs: float
    message_bytes: int
    ranks: int | None = None
    nodes: tuple[str, ...] = ()
    wrong: int = 0
    source: str = ""


_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(-?\d+)\s+(.*)$")
_RANK = re.compile(r"^#\s+Rank\s+\d+\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device")


def parse_nccl_tests(text: str) -> dict[int, Measurement]:
    """nccl-tests all_reduce_perf output (NVIDIA/nccl-tests v2.19.6 src/common.cu): per message size
    the busbw of the slower of out-of-place and in-place (both must reach a floor), and #wrong
    summed. The trailing "# Avg bus bandwidth" is the mean over every size and placement, not a
    figure at one size, so it is never used for a floor. Rows of older versions without the
    redop/root columns (before 2.x reduce ops) are not read."""
    hosts = []
    for line in text.splitlines():
        match = _RANK.match(line)
        if match:
            hosts.append(match.group(1))
    found: dict[int, Measurement] = {}
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        match = _ROW.match(line)
        if not match:
            continue
        fields = match.group(6).split()
        # time algbw busbw #wrong (out-of-place), then the same in place; #wrong is "N/A" without -c.
        if len(fields) < 7:
            continue
        try:
            busbw = [float(fields[2]), float(fields[6])]
        except ValueError:
            continue
        wrong = sum(int(value) for value in (fields[3], fields[7] if len(fields) > 7 else "0") if value.isdigit())
        size = int(match.group(1))
        unique = tuple(dict.fromkeys(hosts))
        found[size] = Measurement(min(busbw), size, len(hosts) or None, unique, wrong, "nccl-tests")
    return found


def parse_average_busbw(text: str) -> float | None:
    """The "# Avg bus bandwidth" line, for the report only."""
    match = re.search(r"^#\s*Avg bus bandwidth\s*:\s*([0-9.]+)", text, re.MULTILINE)
    return float(match.group(1)) if match else None


def out_of_bounds_ok(text: str) -> bool | None:
    """nccl-tests' "# Out of bounds values : N OK|FAILED" (None: not in the text)."""
    match = re.search(r"^#\s*Out of bounds values\s*:\s*(\d+)\s+(OK|FAILED)", text, re.MULTILINE)
    return None if not match else match.group(2) == "OK" and match.group(1) == "0"


def parse_allreduce_report(text: str) -> Measurement | None:
    """aksgpu's all-reduce program's result line (fabric_allreduce.py): the prefix, then JSON."""
    for line in reversed(text.splitlines()):
        if not line.startswith(RESULT_PREFIX + " "):
            continue
        try:
            body = json.loads(line.removeprefix(RESULT_PREFIX + " "))
            return Measurement(float(body["busbwGBs"]), int(body["bytes"]), int(body["ranks"]),
                               tuple(str(n) for n in body.get("nodes") or ()), int(body.get("wrong", 0)), "aksgpu")
        except (ValueError, KeyError, TypeError):
            return None
    return None


def read_measurement(text: str, message_bytes: int) -> Measurement | None:
    """A run's figure at `message_bytes`, from aksgpu's program or from nccl-tests output (an
    operator may point the job at their own nccl-tests run); None when the text has neither."""
    found = parse_allreduce_report(text)
    if found is not None:
        return found
    rows = parse_nccl_tests(text)
    if not rows:
        return None
    # The row at the floor's size; without one, the largest (judge calls it inconclusive: a figure at
    # another size is no evidence either way).
    measured = rows.get(message_bytes) or rows[max(rows)]
    if out_of_bounds_ok(text) is False:
        return Measurement(measured.busbw_gbs, measured.message_bytes, measured.ranks, measured.nodes,
                           max(measured.wrong, 1), measured.source)
    return measured


# --- the decision --------------------------------------------------------------------------


@dataclass(frozen=True)
class Floor:
    """A VM size's acceptance floor (aksgpu/catalog/fabric_acceptance.yaml)."""

    floor_gbs: float
    message_bytes: int
    warn_gbs: float | None = None

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> Floor:
        return cls(float(raw["floorGBs"]), int(raw["messageBytes"]),
                   None if raw.get("warnGBs") is None else float(raw["warnGBs"]))


def judge(measurement: Measurement | None, floor: Floor, started: bool) -> tuple[str, str]:
    """One run against the floor: ("pass" | "fail" | "inconclusive", why). A run whose pods all
    started but that gave no figure failed (NCCL could not connect or time out: busbw 0); one whose
    pods did not all start says nothing about the fabric."""
    if measurement is None:
        if started:
            return "fail", f"the all-reduce did not complete (0 GB/s, floor {floor.floor_gbs:g})"
        return "inconclusive", "the pods did not all start (no idle peer, the image still pulling, or preempted)"
    if measurement.message_bytes != floor.message_bytes:
        return "inconclusive", (f"measured at {measurement.message_bytes} bytes, the floor is for "
                                f"{floor.message_bytes}")
    if measurement.wrong:
        return "fail", f"{measurement.wrong} wrong values in the all-reduce's result"
    figure = f"{measurement.busbw_gbs:.1f} GB/s at {_size(floor.message_bytes)}, floor {floor.floor_gbs:g}"
    if measurement.busbw_gbs < floor.floor_gbs:
        return "fail", f"busbw {figure}"
    if floor.warn_gbs is not None and measurement.busbw_gbs < floor.warn_gbs:
        return "pass", f"busbw {figure} (below Azure's warn line {floor.warn_gbs:g})"
    return "pass", f"busbw {figure}"


def figure(measurement: Measurement | None, floor: Floor) -> float | None:
    """The bus bandwidth a run measured at the floor's message size (GB/s, one decimal), the figure
    the record carries (crossNodeBusBwGbps); None where the run gave none at that size."""
    if measurement is None or measurement.message_bytes != floor.message_bytes:
        return None
    return round(measurement.busbw_gbs, 1)


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**30:g} GiB" if nbytes >= 2**30 else f"{nbytes} B"


@dataclass(frozen=True)
class Result:
    """One pairing a node took part in, as kept on the node (RESULTS_ANNOTATION)."""

    peers: tuple[str, ...]
    outcome: str  # pass, fail, inconclusive
    reason: str
    at: str
    known_good: tuple[str, ...] = ()
    busbw_gbs: float | None = None  # the pairing's bus bandwidth at the floor's size (figure())

    def to_json(self) -> dict[str, Any]:
        return {"peers": list(self.peers), "outcome": self.outcome, "reason": self.reason[:240], "at": self.at,
                **({"knownGood": list(self.known_good)} if self.known_good else {}),
                **({"busbwGBs": self.busbw_gbs} if self.busbw_gbs is not None else {})}

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> Result:
        busbw = raw.get("busbwGBs")
        return cls(tuple(str(p) for p in raw.get("peers") or ()), str(raw.get("outcome")), str(raw.get("reason", "")),
                   str(raw.get("at", "")), tuple(str(p) for p in raw.get("knownGood") or ()),
                   float(busbw) if isinstance(busbw, (int, float)) and not isinstance(busbw, bool) else None)


def results_of(node: dict[str, Any]) -> list[Result]:
    try:
        loaded = json.loads(node_api._annotations(node).get(RESULTS_ANNOTATION) or "[]")
    except ValueError:
        return []
    return [Result.parse(item) for item in loaded if isinstance(item, dict)] if isinstance(loaded, list) else []


@dataclass(frozen=True)
class Decision:
    verdict: str  # passed, failed, released, wait
    reason: str = ""
    suspect: bool = False  # failed once against an unconfirmed peer: pair it with a known-good node next
    busbw_gbs: float | None = None  # the cross-node bus bandwidth of the pairing the reason names

    def measurements(self) -> dict[str, float]:
        """What the verdict's record entry carries (node_verdicts.verdict_entry `measurements`)."""
        return {} if self.busbw_gbs is None else {"crossNodeBusBwGbps": self.busbw_gbs}


def decide(results: list[Result], good: set[str], waited_minutes: float, hold_minutes: float) -> Decision:
    """What a node's pairings say (Azure's rule: a node is bad when the pair it forms with a
    known-good node fails; a new peer is known good once it passed with another node).

    `good`: nodes known good now (in service, or accepted since). A pass accepts the node. A failure
    with a known-good peer, or failures with two different peers, fail it. Otherwise it waits for
    another pairing, up to `hold_minutes`, after which it is released with a warning: the gate fails
    nodes on evidence, and a wrong failure costs a whole VM."""
    passes = [r for r in results if r.outcome == "pass"]
    if passes:
        return Decision("passed", f"{passes[-1].reason} with {', '.join(passes[-1].peers)}",
                        busbw_gbs=passes[-1].busbw_gbs)
    failures = [r for r in results if r.outcome == "fail"]
    against_good = [r for r in failures if set(r.peers) & (good | set(r.known_good))]
    if against_good:
        last = against_good[-1]
        peer = ", ".join(sorted(set(last.peers) & (good | set(last.known_good))))
        return Decision("failed", f"the all-reduce with known-good peer {peer} fell short: {last.reason}",
                        busbw_gbs=last.busbw_gbs)
    peers = {peer for r in failures for peer in r.peers}
    if len(peers) >= 2:
        return Decision("failed", "the all-reduce fell short with two different peers: " +
                        "; ".join(f"with {', '.join(r.peers)}: {r.reason}" for r in failures[-2:]),
                        busbw_gbs=_highest(r.busbw_gbs for r in failures[-2:]))
    if waited_minutes >= hold_minutes:
        if failures:
            return Decision("released", f"no decision within {hold_minutes:g} minutes: the all-reduce with "
                            f"{', '.join(failures[-1].peers)} fell short ({failures[-1].reason}), and no second "
                            "peer was free to tell which node is at fault", busbw_gbs=failures[-1].busbw_gbs)
        tried = len(results)
        return Decision("released", f"not measured within {hold_minutes:g} minutes: no peer was free"
                        + (f" ({tried} run(s) did not start)" if tried else ""))
    return Decision("wait", suspect=bool(failures))


def _highest(values: Iterable[float | None]) -> float | None:
    """The best of a node's figures (a pairing is bounded by its slower member)."""
    found = [v for v in values if v is not None]
    return max(found) if found else None


def plan_pairings(waiting: list[str], results: dict[str, list[Result]], idle_good: list[str]) -> list[tuple[str, ...]]:
    """Pairings to run now for the nodes of one pool that wait for acceptance.

    Suspects (a failed pairing behind them) go first, each with a different idle known-good node, or
    else with a new node they have not failed with; the other new nodes two by two, never with a
    peer they already failed with; a node left over with an idle known-good node. Nodes without a
    pairing this pass wait for the next."""
    pairings: list[tuple[str, ...]] = []
    free_good = list(idle_good)
    failed_with = {name: {peer for r in results.get(name, []) if r.outcome == "fail" for peer in r.peers}
                   for name in waiting}
    suspects = [name for name in waiting if failed_with[name]]
    fresh = [name for name in waiting if not failed_with[name]]
    for name in suspects:
        if free_good:
            pairings.append((name, free_good.pop(0)))
    # Suspects without a known-good peer first: a second peer is what tells their failure apart.
    leftover = [name for name in suspects if not any(name in p for p in pairings)]
    pool = [*leftover, *fresh]
    used: set[str] = set()
    for index, name in enumerate(pool):
        if name in used:
            continue
        partner = next((other for other in pool[index + 1:] if other not in used and other not in failed_with[name]
                        and name not in failed_with[other]), None)
        if partner is not None:
            pairings.append((name, partner))
            used |= {name, partner}
        elif free_good and not failed_with[name]:
            pairings.append((name, free_good.pop(0)))
            used.add(name)
    return pairings
