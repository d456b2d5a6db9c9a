"""The fleet side of promotion against fakes of Azure (aksgpu/promotion/fleet.py): the Fleet
Manager after-group approval answered from the canary's decision, never before minCanaryNodes
passed, and the canary's verdicts from Log Analytics. The listing below has the shape of
Azure/azure-rest-api-specs .../fleet/preview/2025-04-01-preview/examples/Gates_ListByFleet.json;
nothing here reached Azure."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from aksgpu.errors import UserError
from aksgpu.preflight.verdict_history import verdict_query
from aksgpu.promotion import fleet, records
from aksgpu.promotion.decision import Decision, Rules, decide, select
from tests.helpers import local_http_server

DATA = Path(__file__).resolve().parent / "data" / "promotion"
FLEET = ("/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg1/providers/"
         "Microsoft.ContainerService/fleets/fleet1")


def _gate(name: str, group: str, timing: str, state: str = "Pending", run: str = "run1") -> dict[str, Any]:
    return {"id": f"{FLEET}/gates/{name}", "name": name, "type": "Microsoft.ContainerService/fleets/gates",
            "properties": {"provisioningState": "Succeeded", "displayName": f"{timing} {group}", "gateType": "Approval",
                           "state": state, "target": {"id": f"{FLEET}/updateRuns/{run}", "type": "UpdateRun",
                                                      "properties": {"updateRun": {"name": run, "stage": "stage1",
                                                                                   "group": group, "timing": timing}}}}}


LISTING = [{"value": [_gate("g-before", "canary", "Before"), _gate("g-after", "canary", "After")],
            "nextLink": f"https://management.azure.com{FLEET}/gates?page=2"},
           {"value": [_gate("g-other", "prod", "After"), _gate("g-done", "canary", "After", "Completed"),
                      _gate("g-run2", "canary", "After", run="run2")], "nextLink": None}]


class FakeArm:
    """Stands in for Azure Resource Manager: the two pages of gates, and the PATCHes it was sent."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str, Any]] = []

    def __call__(self, method: str, url: str, audience: str, body: dict[str, Any] | None) -> Any:
        self.calls.append((method, url, audience, body))
        if method == "GET":
            return LISTING[1] if "page=2" in url else LISTING[0]
        return {}


def _decision(name: str, rules: Rules) -> Decision:
    found = records.read_file(DATA / f"{name}.jsonl")
    candidate, canary, base = select(found, "h100c")
    return decide(canary, base, rules, candidate)


RULES = Rules(min_canary_nodes=3)


def test_a_promote_approves_only_the_after_gate_of_the_canary_group() -> None:
    arm = FakeArm()
    approved, why = fleet.answer_after_gate(arm, FLEET, "run1", "canary", _decision("healthy", RULES), RULES)
    assert [g.name for g in approved] == ["g-after"] and "3 canary nodes passed" in why
    patches = [c for c in arm.calls if c[0] == "PATCH"]
    # Gates_Update (2025-04-01-preview): PATCH the gate with its state Completed.
    assert patches == [("PATCH", f"https://management.azure.com{FLEET}/gates/g-after?api-version=2025-04-01-preview",
                        "https://management.azure.com", {"properties": {"state": "Completed"}})]
    assert arm.calls[0][1] == f"https://management.azure.com{FLEET}/gates?api-version=2025-04-01-preview"
    assert len([c for c in arm.calls if c[0] == "GET"]) == 2, "every page is read"


@pytest.mark.parametrize("name", ["partial-data", "slow-gemm", "driver-mismatch"])
def test_no_approval_and_no_call_unless_the_canary_promotes(name: str) -> None:
    arm = FakeArm()
    approved, why = fleet.answer_after_gate(arm, FLEET, "run1", "canary", _decision(name, RULES), RULES)
    assert approved == [] and arm.calls == [] and "the canary's decision is" in why


def test_never_before_min_canary_nodes_passed() -> None:
    promote = Decision("promote", ("ok",), (), (), {"passed": 2})
    arm = FakeArm()
    approved, why = fleet.answer_after_gate(arm, FLEET, "run1", "canary", promote, RULES)
    assert approved == [] and arm.calls == [] and why == "only 2 canary nodes passed; the rule needs 3"


def test_dry_run_lists_but_approves_nothing() -> None:
    arm = FakeArm()
    approved, _ = fleet.answer_after_gate(arm, FLEET, "run1", "canary", _decision("healthy", RULES), RULES,
                                          dry_run=True)
    assert [g.name for g in approved] == ["g-after"] and all(c[0] == "GET" for c in arm.calls)


def test_log_analytics_rows_become_verdicts() -> None:
    lines = (DATA / "healthy.jsonl").read_text().splitlines()
    sent = []

    def send(method: str, url: str, audience: str, body: dict[str, Any] | None) -> Any:
        sent.append((method, url, audience, body))
        # The query's own rows (TimeGenerated, entry: the JSON after the prefix), log lines, objects.
        rows = [["2026-11-26T09:00:00Z", line] for line in lines[:2]]
        rows += [["2026-11-26T10:00:00Z", f"aksgpu-gpu-health {line}"] for line in lines[2:4]]
        rows += [["2026-11-26T11:00:00Z", json.loads(line)] for line in lines[4:]]
        return {"tables": [{"name": "PrimaryResult", "columns": [{"name": "TimeGenerated"}, {"name": "LogMessage"}],
                            "rows": rows}]}

    found = fleet.log_analytics_verdicts(send, "63613592-b6f7-4c3d-a390-22ba13102111", 7, "gpu-fleet-canary")
    assert found == records.read_file(DATA / "healthy.jsonl")
    assert sent == [("POST", "https://api.loganalytics.io/v1/workspaces/63613592-b6f7-4c3d-a390-22ba13102111/query",
                     "https://api.loganalytics.io", {"query": verdict_query(7, "gpu-fleet-canary"), "timespan": "P7D"})]
    # Members share the fleet's workspace and their pools' names: the query keeps to one cluster.
    assert '_ResourceId endswith "/managedclusters/gpu-fleet-canary"' in sent[0][3]["query"]


class _Handler(BaseHTTPRequestHandler):
    seen: list[tuple[str, str, str, Any]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        self.seen.append((self.command, self.path, self.headers["Authorization"], body))
        payload = json.dumps({"value": [], "nextLink": None}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self) -> None:  # noqa: N802
        self._answer()

    def do_PATCH(self) -> None:  # noqa: N802
        self._answer()


@pytest.fixture
def local_server() -> Iterator[str]:
    with local_http_server(_Handler) as url:
        yield url


def test_the_https_client_sends_the_token_and_the_body(local_server: str) -> None:
    _Handler.seen.clear()
    audiences = []

    def token(audience: str) -> str:
        audiences.append(audience)
        return "t0ken"

    send = fleet.https_send(token)
    assert send("PATCH", f"{local_server}/gates/g1?api-version=x", fleet.ARM, {"properties": {"state": "Completed"}}) \
        == {"value": [], "nextLink": None}
    assert _Handler.seen == [("PATCH", "/gates/g1?api-version=x", "Bearer t0ken",
                              {"properties": {"state": "Completed"}})]
    assert audiences == [fleet.ARM]
    with pytest.raises(UserError, match="failed"):
        send("GET", "http://127.0.0.1:9/x", fleet.ARM, None)


def test_the_az_token_comes_from_the_azure_cli() -> None:
    import subprocess

    calls = []

    def run(command: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(command)
        return subprocess.CompletedProcess(command, 0, "eyJ0\n", "")

    assert fleet.az_token(fleet.ARM, run=run) == "eyJ0"
    assert calls == [["az", "account", "get-access-token", "--resource", fleet.ARM, "--query", "accessToken",
                      "-o", "tsv"]]
