"""The watchdog's passive cordon: cordon GPU nodes whose DCGM exporter shows a critical condition
(the alert rules' cordon blocks) or whose node-problem-detector raised a GPU condition, unless so
many nodes of a pool show one that a metric or detector gone wrong is the likelier story.

Standard library only: shipped beside node_gate.py as a key of the gate's ConfigMap."""

from __future__ import annotations

import datetime
import re
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

try:
    from aksgpu.node import node_api, node_verdicts
except ImportError:  # in the cluster: sibling files of one folder (the ConfigMap's keys)
    import node_api  # type: ignore[no-redef,import-not-found]
    import node_verdicts  # type: ignore[no-redef,import-not-found]


def get_text(url: str, timeout: float = 3.0) -> str:
    """A plain HTTP GET (a DCGM exporter's /metrics)."""
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - a pod IP the API listed
        return response.read().decode("utf-8", "replace")


@dataclass(frozen=True)
class CordonCondition:
    """A DCGM exporter series that cordons its node when a sample is above `above` (and, with
    `label`, carries one of `values` there), from the alert rules' cordon blocks."""

    metric: str
    above: float = 0.0
    label: str | None = None
    values: tuple[str, ...] = ()

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> CordonCondition:
        return cls(str(raw["metric"]), float(raw.get("above", 0)), raw.get("label"),
                   tuple(str(v) for v in raw.get("values") or ()))


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')
_LABEL_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Samples of a Prometheus text exposition: (name, labels, value); comments and junk skipped."""
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        samples.append((match.group(1), dict(_LABEL_PAIR.findall(match.group(2) or "")), value))
    return samples


def critical_findings(samples: list[tuple[str, dict[str, str], float]],
                      conditions: list[CordonCondition]) -> list[str]:
    """What in one exporter scrape cordons the node, as "metric{gpu=..,label=..}=value"."""
    found = []
    for name, labels, value in samples:
        for condition in conditions:
            if name != condition.metric or not value > condition.above:
                continue
            if condition.label and labels.get(condition.label) not in condition.values:
                continue
            where = ",".join(f"{key}={labels[key]}" for key in ("gpu", condition.label or "") if key in labels)
            found.append(f"{name}{{{where}}}={value:g}")
    return found


def npd_findings(node: dict[str, Any], cordon_types: set[str]) -> list[str]:
    """node-problem-detector conditions that are True and cordon a node."""
    return [f"{c.get('type')}: {c.get('reason') or ''} {c.get('message') or ''}".strip()
            for c in node.get("status", {}).get("conditions") or []
            if c.get("type") in cordon_types and c.get("status") == "True"]


def passive_cordon(api: node_api.Api, nodes: list[dict[str, Any]], policy: node_verdicts.Policy,
                   cordon: list[CordonCondition],
                   npd_cordon: set[str], exporter_namespaces: list[str], exporter_port: int,
                   fetch: Callable[[str], str], gate_enabled: bool,
                   now: datetime.datetime) -> tuple[list[str], list[str]]:
    """Cordon nodes whose exporter shows a critical condition or whose node-problem-detector
    raised a GPU condition, through the same failure step as the check. Per pool, when more than
    the breaker's share of its nodes would be (or within the breaker's window were) cordoned this
    way, and at least its minimum, none is: a metric or detector gone wrong must not empty a pool,
    at once or a few nodes a pass; the alerts still fire. A spared node is reported once an hour,
    as an Event and a log line, not in the record (whose entries are the verdicts)."""
    by_name = {node["metadata"]["name"]: node for node in nodes}
    since = now - datetime.timedelta(minutes=policy.breaker_window_minutes)
    _, entries = node_verdicts.read_record(api, policy.namespace)
    recent: dict[str | None, set[str]] = {}
    for entry in entries:
        if entry.get("source") == "passive" and entry.get("verdict") == "failed" and \
                (node_api._timestamp(entry.get("time")) or since) > since:
            recent.setdefault(entry.get("pool"), set()).add(str(entry.get("node")))
    findings: dict[str, list[str]] = {}
    for name, node in by_name.items():
        if node_api._labels(node).get(node_api.HEALTH_LABEL) in ("failed", "pending", "held"):
            continue
        found = npd_findings(node, npd_cordon)
        if found:
            findings[name] = found
    if cordon:
        for namespace in exporter_namespaces:
            pods = node_api._per_node(namespace, lambda: api.list_pods(
                namespace, "app=nvidia-dcgm-exporter", "status.phase=Running")) or []
            for pod in pods:
                node_name = pod.get("spec", {}).get("nodeName")
                pod_ip = pod.get("status", {}).get("podIP")
                if node_name not in by_name or not pod_ip:
                    continue
                if node_api._labels(by_name[node_name]).get(node_api.HEALTH_LABEL) in ("failed", "pending", "held"):
                    continue
                host = f"[{pod_ip}]" if ":" in pod_ip else pod_ip
                try:
                    text = fetch(f"http://{host}:{exporter_port}/metrics")
                except (urllib.error.URLError, OSError, ValueError) as error:
                    print(f"aksgpu: could not read the DCGM exporter on {node_name}: {error}", file=sys.stderr)
                    continue
                found = critical_findings(parse_metrics(text), cordon)
                if found:
                    findings.setdefault(node_name, []).extend(found)
    pool_sizes: dict[str | None, int] = {}
    for node in nodes:
        pool = node_api._labels(node).get(node_api.AGENT_POOL_LABEL)
        pool_sizes[pool] = pool_sizes.get(pool, 0) + 1
    per_pool: dict[str | None, list[str]] = {}
    for name in findings:
        per_pool.setdefault(node_api._labels(by_name[name]).get(node_api.AGENT_POOL_LABEL), []).append(name)
    cordoned, spared = [], []
    for pool, names in per_pool.items():
        affected = len(set(names) | recent.get(pool, set()))
        systemic = (policy.breaker and affected >= policy.breaker_min_nodes
                    and affected / pool_sizes[pool] > policy.breaker_share)
        for name in sorted(names):
            reason = "; ".join(findings[name])[:1024]
            if systemic:
                spared.append(name)
                last = node_api._timestamp(node_api._annotations(by_name[name]).get(node_api.SPARED_AT_ANNOTATION))
                if last is not None and (now - last).total_seconds() < 3600:
                    continue
                if node_api._per_node(name, lambda: node_api.update_node(api, name, lambda _node: {"metadata": {
                        "annotations": {node_api.SPARED_AT_ANNOTATION: node_api._stamp(now)}}})) is None:
                    continue
                node_verdicts.report(api, policy, by_name[name], "passive", "spared", "passive",
                                     f"{affected} of the {pool_sizes[pool]} nodes of pool {pool} showed critical "
                                     f"conditions within {policy.breaker_window_minutes:g} minutes, which looks like a "
                                     f"metric or detector gone wrong: none is cordoned, the alerts still fire. "
                                     f"This node: {reason}", now,
                                     record=False)
                continue
            check = node_api.label_value("passive-" + findings[name][0].split("{")[0].split(":")[0])
            if not node_api._per_node(name, lambda: node_verdicts.fail_node(
                    api, name, check, f"passive: {reason}", {node_api.CHECKED_AT_ANNOTATION: node_api._stamp(now)},
                    keep=policy.keep_failed > 0, expected=node_api._state_is_not("failed", "pending", "held"))):
                continue
            node_verdicts.report(api, policy, by_name[name], "passive", "failed", check, reason, now)
            cordoned.append(name)
    return cordoned, spared
