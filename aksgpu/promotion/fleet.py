"""A fleet's canary: its verdicts from Log Analytics, and the Fleet Manager update run's
after-group approval answered from them (docs/guides/promotion.md, "Fleets").

Built to Azure's boundary and tested against fakes of it only; nothing here has run against Azure.

- Approval gates (Fleet Manager, Microsoft.ContainerService/fleets/gates, api-version
  2025-04-01-preview: operations Gates_ListByFleet, GET .../fleets/{fleet}/gates, and Gates_Update,
  PATCH .../fleets/{fleet}/gates/{gate} with {"properties": {"state": "Completed"}}; a gate's
  properties.target.properties.updateRun names run, stage, group and timing Before or After:
  Azure/azure-rest-api-specs specification/containerservice/resource-manager/Microsoft.ContainerService/
  fleet/preview/2025-04-01-preview/examples/Gates_ListByFleet.json and Gates_Update.json; the
  approval flow: learn.microsoft.com/azure/kubernetes-fleet/update-strategies-gates-approvals; read
  2026-11-27). aksgpu approves only an After gate of the canary member's group, only on a promote
  decision with at least minCanaryNodes canary nodes passed.
- Log Analytics (POST https://api.loganalytics.io/v1/workspaces/{workspaceId}/query with
  {"query", "timespan"}; the answer's tables[0] has columns and rows:
  learn.microsoft.com/rest/api/loganalytics/dataaccess/query/execute, read 2026-11-27) runs the
  capacity side's KQL over ContainerLogV2 for the gate's "aksgpu-gpu-health" lines
  (aksgpu/preflight/verdict_history.py verdict_query).
- Tokens: `az account get-access-token --resource <audience>` (the user's Azure CLI sign-in)."""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aksgpu.errors import UserError
from aksgpu.preflight.verdict_history import verdict_query
from aksgpu.promotion.decision import Decision, Rules
from aksgpu.promotion.records import Verdict, parse_lines

ARM = "https://management.azure.com"
FLEET_API_VERSION = "2025-04-01-preview"
LOG_ANALYTICS = "https://api.loganalytics.io"

Send = Callable[[str, str, str, dict[str, Any] | None], Any]  # method, url, token audience, body -> JSON


@dataclass(frozen=True)
class Gate:
    id: str
    name: str
    state: str
    gate_type: str
    display_name: str
    run: str
    stage: str
    group: str
    timing: str


def parse_gates(listing: dict[str, Any]) -> list[Gate]:
    found = []
    for item in listing.get("value") or []:
        props = item.get("properties") or {}
        run = ((props.get("target") or {}).get("properties") or {}).get("updateRun") or {}
        found.append(Gate(str(item.get("id")), str(item.get("name")), str(props.get("state")),
                          str(props.get("gateType")), str(props.get("displayName") or ""),
                          str(run.get("name")), str(run.get("stage")), str(run.get("group")),
                          str(run.get("timing"))))
    return found


def pending_after_gates(gates: list[Gate], run: str, group: str) -> list[Gate]:
    """The approvals that wait after `group` of update run `run`."""
    return [g for g in gates if g.gate_type == "Approval" and g.state == "Pending" and g.run == run
            and g.group == group and g.timing == "After"]


def may_approve(decision: Decision, rules: Rules) -> tuple[bool, str]:
    """Whether the canary's decision answers the approval: promote, and at least minCanaryNodes passed."""
    passed = int(decision.evidence.get("passed") or 0)
    if decision.action != "promote":
        return False, f"the canary's decision is {decision.action}: {'; '.join(decision.reasons)}"
    if passed < rules.min_canary_nodes:
        return False, f"only {passed} canary nodes passed; the rule needs {rules.min_canary_nodes}"
    return True, f"{passed} canary nodes passed on the candidate"


def az_token(audience: str, run: Callable[..., Any] = subprocess.run) -> str:
    """An access token for `audience` from the Azure CLI's sign-in."""
    command = ["az", "account", "get-access-token", "--resource", audience, "--query", "accessToken", "-o", "tsv"]
    try:
        done = run(command, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise UserError(f"cannot run the Azure CLI: {error}. Fix: install it and run `az login`") from None
    if done.returncode != 0 or not done.stdout.strip():
        raise UserError(f"`az account get-access-token` failed: {done.stderr.strip()}. Fix: run `az login`")
    return str(done.stdout.strip())


def https_send(token: Callable[[str], str] = az_token) -> Send:
    """The real client: one HTTPS request with a bearer token for the URL's audience, JSON in and out."""
    def send(method: str, url: str, audience: str, body: dict[str, Any] | None) -> Any:
        request = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(),
                                         method=method)
        request.add_header("Authorization", f"Bearer {token(audience)}")
        request.add_header("Accept", "application/json")
        if body is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as error:
            detail = error.read().decode(errors="replace")[:300]
            raise UserError(f"{method} {url.split('?')[0]} answered {error.code}: {detail}. Fix: check the "
                            "resource and your role on it") from None
        except (urllib.error.URLError, OSError, ValueError) as error:
            raise UserError(f"{method} {url.split('?')[0]} failed: {error}. Fix: check the network "
                            "connection to Azure and retry") from None
    return send


def list_gates(send: Send, fleet_id: str) -> list[Gate]:
    url: str | None = f"{ARM}{fleet_id}/gates?api-version={FLEET_API_VERSION}"
    gates: list[Gate] = []
    while url:
        page = send("GET", url, ARM, None)
        gates += parse_gates(page)
        url = page.get("nextLink")
    return gates


def approve(send: Send, gate: Gate) -> None:
    send("PATCH", f"{ARM}{gate.id}?api-version={FLEET_API_VERSION}", ARM, {"properties": {"state": "Completed"}})


def answer_after_gate(send: Send, fleet_id: str, run: str, group: str, decision: Decision,
                      rules: Rules, dry_run: bool = False) -> tuple[list[Gate], str]:
    """Approve the pending After gates of `group` in `run` when the decision allows it; returns the
    gates approved (none when it does not, or under `dry_run`) and why."""
    allowed, why = may_approve(decision, rules)
    if not allowed:
        return [], why
    waiting = pending_after_gates(list_gates(send, fleet_id), run, group)
    if not waiting:
        return [], f"no approval waits after group {group} of update run {run}"
    if not dry_run:
        for gate in waiting:
            approve(send, gate)
    return waiting, why


def log_analytics_verdicts(send: Send, workspace_id: str, days: int, cluster: str | None = None) -> list[Verdict]:
    """The gate's verdicts of the last `days` days from a Log Analytics workspace (its customer ID);
    `cluster`: only that AKS cluster's (a fleet's members share a workspace, and their pools' names)."""
    answer = send("POST", f"{LOG_ANALYTICS}/v1/workspaces/{workspace_id}/query", LOG_ANALYTICS,
                  {"query": verdict_query(days, cluster), "timespan": f"P{days}D"})
    cells: list[str | dict[str, Any]] = [cell for table in answer.get("tables") or [] for row in table.get("rows") or []
                                         for cell in row if isinstance(cell, (str, dict))]
    return parse_lines(cells)
