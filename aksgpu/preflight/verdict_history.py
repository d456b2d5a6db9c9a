"""The gate's verdict history a project checks in, for the plan's capacity section: where it lives,
how it is read (offline, so a plan stays deterministic), how it is refreshed from Log Analytics or
the record ConfigMap, and how an export is merged into it without losing what was there.

The file: stacks/verdicts/<stack>.jsonl beside environments.yaml, one verdict entry per line as the
gate writes it (aksgpu/node/node_verdicts.py verdict_entry: time, node, pool, vmSize, source,
verdict, check, reason; and where the gate records them, zone, secondsToVerdict, fingerprint,
measurements). A stack points at its history by its name; no spec field names it, so a stack
without one plans as before, and the plan says its estimates come from anchors.

Where the entries come from (read 2026-11-27):
- The gate prints each verdict as one stdout line "aksgpu-gpu-health <JSON>" (node_verdicts.py
  log_verdict, LOG_PREFIX). With Container Insights on, aksgpu turns on ContainerLogV2
  (components/monitoring.py enableContainerLogV2), whose LogMessage column (dynamic) holds the line,
  beside TimeGenerated, PodNamespace and _ResourceId (the cluster's resource ID)
  (learn.microsoft.com/azure/azure-monitor/reference/tables/containerlogv2).
- `az monitor log-analytics query --workspace <customer ID> --analytics-query <KQL>` runs a query and
  prints its rows as a JSON array of objects, one key per column (learn.microsoft.com/cli/azure/
  monitor/log-analytics#az-monitor-log-analytics-query; an extension az installs on first use).
- The record ConfigMap aksgpu-gpu-health-record (namespace aksgpu-system) holds the newest entries
  as JSON lines under `verdicts` (node_verdicts.py RECORD_CONFIGMAP, RECORD_KEY).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aksgpu.errors import Problem, UserError
from aksgpu.project.files import locked_for_writing, read_text_if_exists, write_text_atomically
from aksgpu.spec import ClusterSpec
from aksgpu.spec.fleet import FleetSpec
from aksgpu.spec.fleet import log_analytics_workspace as fleet_workspace
from aksgpu.spec.names import log_analytics_workspace
from aksgpu.spec.resource_ids import ResourceId, parse as parse_resource_id

# The watchdog's failures of a node whose check never started or never finished (node/node_watchdog.py:
# a driver that never loads ends there, not in a check verdict): they judge the node as a check would.
WATCHDOG_FAILURES = ("gate-timeout", "gate-unstarted")
LOG_PREFIX = "aksgpu-gpu-health"  # node_verdicts.LOG_PREFIX; tests/test_verdict_history.py holds them equal
RECORD_CONFIGMAP = "aksgpu-gpu-health-record"
RECORD_KEY = "verdicts"
RECORD_NAMESPACE = "aksgpu-system"
HISTORY_FOLDER = "verdicts"  # under the project's stacks/
# What makes two entries the same verdict (an export overlapping the snapshot adds nothing twice).
IDENTITY = ("time", "node", "source", "verdict", "check")


def history_path(project_dir: Path, stack: str) -> Path:
    """Where a stack's verdict history lives: stacks/verdicts/<stack>.jsonl."""
    return project_dir / "stacks" / HISTORY_FOLDER / f"{stack}.jsonl"


def verdict_query(days: int, cluster: str | None = None) -> str:
    """The Log Analytics (KQL) query for the gate's verdict lines of the last `days` days, oldest first,
    one row per verdict with its JSON in the column `entry`; `cluster`: only that AKS cluster's."""
    if days < 1:
        raise UserError(problems=[Problem("--days", days, "the query needs at least one day",
                                          "pass --days 30 (or more)")])
    where_cluster = f'\n| where _ResourceId endswith "/managedclusters/{cluster.lower()}"' if cluster else ""
    return (f"ContainerLogV2\n| where TimeGenerated > ago({days}d){where_cluster}\n"
            f"| extend line = tostring(LogMessage)\n| where line startswith \"{LOG_PREFIX} \"\n"
            f"| project TimeGenerated, entry = substring(line, {len(LOG_PREFIX) + 1})\n| order by TimeGenerated asc")


def query_command(days: int, workspace: str, resource_group: str | None, cluster: str | None, output: str) -> str:
    """The `az monitor log-analytics query` command line that writes the export to `output`. `workspace`:
    the workspace's name (with its resource group, looked up for its customer ID) or its customer ID."""
    kql = " ".join(verdict_query(days, cluster).split("\n"))
    lookup = (f"az monitor log-analytics workspace show -g {shlex.quote(resource_group or '')} "
              f"-n {shlex.quote(workspace)} --query customerId -o tsv")
    # Without a resource group `workspace` is a customer ID (a GUID) or the placeholder for one, shown as is.
    where = f'"$({lookup})"' if resource_group else workspace
    return (f"az monitor log-analytics query --workspace {where} --analytics-query {shlex.quote(kql)} "
            f"--timespan P{days}D -o json > {shlex.quote(output)}")


def record_command(output: str) -> str:
    """The kubectl command that writes the record ConfigMap's entries (the newest ones) to `output`."""
    return (f"kubectl get configmap {RECORD_CONFIGMAP} -n {RECORD_NAMESPACE} "
            f"-o jsonpath='{{.data.{RECORD_KEY}}}' > {shlex.quote(output)}")


def workspace_of(spec: ClusterSpec, fleet: FleetSpec | None = None) -> tuple[str, str | None] | str:
    """(workspace name, its resource group) or (customer ID placeholder, None) for the query command;
    a text saying why there is nothing to query when the cluster sends no container logs. `fleet`:
    the spec of the fleet whose shared workspace a member with logAnalytics mode "fleet" uses, which
    names it as the shared stack creates it (components/fleet.py _workspaces: per member region, or
    the fleet's single one, in the fleet's resource group)."""
    analytics = spec.monitoring.log_analytics
    if analytics.mode == "none" or not spec.monitoring.container_insights:
        return (f"{spec.name} sends no container logs to Log Analytics (monitoring.containerInsights off or "
                "monitoring.logAnalytics.mode none), so only the record ConfigMap holds verdicts")
    if analytics.mode == "create":
        return analytics.name or log_analytics_workspace(spec.name), spec.resource_group.name
    found = parse_resource_id(analytics.workspace_id) if analytics.mode == "existing" and analytics.workspace_id \
        else None
    if isinstance(found, ResourceId):
        return found.name, found.resource_group
    if analytics.mode == "fleet" and fleet is not None and fleet.log_analytics.mode != "perMember":
        region = spec.location if fleet.log_analytics.mode == "perRegion" else None
        return fleet_workspace(fleet.name, region), fleet.resource_group
    return "<customer ID of the fleet's workspace in the cluster's region>", None


@dataclass
class Parsed:
    """Entries read from a file, and the lines (1-based) or rows that held none."""

    entries: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)


def entry_of(value: Any) -> dict[str, Any] | None:
    """A verdict entry from a row, a JSON text or a log line; None when it holds none."""
    if isinstance(value, dict):
        if isinstance(value.get("entry"), str | dict):  # a row of the Log Analytics export
            return entry_of(value["entry"])
        return value if "verdict" in value else None
    if not isinstance(value, str):
        return None
    text = value.strip()
    if LOG_PREFIX in text:  # a log line, also behind what a log collector puts before it (a timestamp)
        text = text.split(LOG_PREFIX, 1)[1].strip()
    try:
        loaded = json.loads(text)
    except ValueError:
        return None
    return loaded if isinstance(loaded, dict) and "verdict" in loaded else None


def parse_entries(text: str) -> Parsed:
    """The entries of an export: the JSON array `az monitor log-analytics query` prints (rows with an
    `entry` column, or entries), JSON lines (the ConfigMap's `verdicts`, a snapshot), or log lines."""
    parsed = Parsed()
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            rows = json.loads(stripped)
        except ValueError:
            rows = None
        if isinstance(rows, list):
            for index, row in enumerate(rows, 1):
                entry = entry_of(row)
                parsed.entries.append(entry) if entry is not None else parsed.skipped.append(index)
            return parsed
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        entry = entry_of(line)
        parsed.entries.append(entry) if entry is not None else parsed.skipped.append(number)
    return parsed


def read_history(project_dir: Path, stack: str) -> list[dict[str, Any]] | None:
    """The stack's checked-in verdict entries, oldest first; None when it has no history file. A line
    that is not an entry is an error naming the file and line: the plan must not guess around it."""
    path = history_path(project_dir, stack)
    text = read_text_if_exists(path)
    if text is None:
        return None
    parsed = parse_entries(text)
    if parsed.skipped:
        lines = text.splitlines()
        # A line number for JSON lines; for a JSON array, the row number (the line is then shown whole).
        line = lines[parsed.skipped[0] - 1] if parsed.skipped[0] <= len(lines) else text
        raise UserError(problems=[Problem(
            f"line {parsed.skipped[0]}", line, "every line of a verdict history is a verdict entry (a JSON object "
            "with a \"verdict\" key)",
            f"correct or remove the line, or import the export again (`aksgpu verdict-history import {stack} FILE`)",
            source=str(path))], source=str(path))
    return _sorted(parsed.entries)


def _identity(entry: dict[str, Any]) -> str:
    return json.dumps([entry.get(key) for key in IDENTITY], default=str)


def _sorted(entries: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(entries, key=lambda entry: (str(entry.get("time") or ""), str(entry.get("node") or "")))


def merge(current: list[dict[str, Any]], new: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """Every current entry and each new one not already there, oldest first; and how many were new."""
    seen = {_identity(entry) for entry in current}
    added = []
    for entry in new:
        key = _identity(entry)
        if key not in seen:
            seen.add(key)
            added.append(entry)
    return _sorted([*current, *added]), len(added)


def history_text(entries: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(entry, sort_keys=True) + "\n" for entry in entries)


@dataclass(frozen=True)
class Imported:
    path: Path
    added: int
    total: int
    skipped: list[int]


def import_export(project_dir: Path, stack: str, export_text: str, source: str) -> Imported:
    """Merge an export into the stack's history: under the project's lock, the current file read (a
    broken one refuses the import, so nothing in it is lost), the union written whole or not at all."""
    parsed = parse_entries(export_text)
    if not parsed.entries:
        raise UserError(problems=[Problem(
            "FILE argument", source, "an export holds verdict entries (lines or rows with a JSON object that has "
            f"a \"verdict\" key, or log lines starting \"{LOG_PREFIX}\"); nothing was written",
            "pass the file `aksgpu verdict-history query` has you write")])
    path = history_path(project_dir, stack)
    with locked_for_writing(project_dir):
        current = read_history(project_dir, stack) or []
        merged, added = merge(current, parsed.entries)
        if added:
            write_text_atomically(path, history_text(merged))
    return Imported(path, added, len(merged), parsed.skipped)
