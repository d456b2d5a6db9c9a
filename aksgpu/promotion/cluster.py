"""The gate's verdicts read from a cluster through the Kubernetes API: the record ConfigMap
(aksgpu-gpu-health-record, key "verdicts") and the gate's Events on Nodes (source
aksgpu-gpu-gate, namespace default: node_verdicts.py emit_event). Two ways in, both plain GETs:
`kubectl get --raw PATH` (kubectl signs in as the user's kubeconfig says, kubelogin included), or
an API server URL without sign-in, as `kubectl proxy` serves one (http://127.0.0.1:8001)."""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aksgpu.errors import UserError
from aksgpu.preflight.verdict_history import RECORD_CONFIGMAP, RECORD_NAMESPACE
from aksgpu.promotion.records import Verdict, parse_configmap

EVENT_SOURCE = "aksgpu-gpu-gate"  # node_verdicts.EVENT_SOURCE
EVENT_NAMESPACE = "default"  # node_verdicts.NODE_EVENT_NAMESPACE

Get = Callable[[str], Any]


def http_get(base_url: str) -> Get:
    """GET `path` from an API server that needs no sign-in (kubectl proxy), as JSON."""
    def get(path: str) -> Any:
        try:
            with urllib.request.urlopen(base_url.rstrip("/") + path, timeout=30) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as error:
            raise UserError(f"the API server at {base_url} answered {error.code} for {path}. Fix: check that "
                            "the gate runs there (gpuHealth.gate) and that you may read it") from None
        except (urllib.error.URLError, OSError, ValueError) as error:
            raise UserError(f"cannot read {path} from {base_url}: {error}. Fix: start `kubectl proxy` "
                            "and pass its address to --api-server") from None
    return get


def kubectl_get(context: str | None = None, run: Callable[..., Any] = subprocess.run) -> Get:
    """GET `path` through `kubectl get --raw` (the current kubeconfig, or `context`), as JSON."""
    def get(path: str) -> Any:
        command = ["kubectl", *(["--context", context] if context else []), "get", "--raw", path]
        try:
            done = run(command, capture_output=True, text=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise UserError(f"cannot run kubectl: {error}. Fix: install kubectl and write a kubeconfig with "
                            "`aksgpu kubeconfig ENV`, or pass --verdicts FILE") from None
        if done.returncode != 0:
            raise UserError(f"`{' '.join(command)}` failed: {done.stderr.strip() or done.returncode}. Fix: sign in "
                            "to the cluster (`aksgpu kubeconfig ENV`), or pass --verdicts FILE")
        try:
            return json.loads(done.stdout or "{}")
        except ValueError:
            raise UserError(f"`{' '.join(command)}` printed no JSON. Fix: run it yourself to see what it "
                            "prints, or pass --verdicts FILE") from None
    return get


@dataclass(frozen=True)
class ClusterVerdicts:
    records: list[Verdict]
    event_only_nodes: list[str]  # nodes with a gate Event but no record entry (the record lost them)


def read(get: Get, namespace: str = RECORD_NAMESPACE) -> ClusterVerdicts:
    """The record's entries, and the nodes the gate's Events name that the record does not."""
    configmap = get(f"/api/v1/namespaces/{namespace}/configmaps/{RECORD_CONFIGMAP}")
    records = parse_configmap(configmap if isinstance(configmap, dict) else {})
    selector = urllib.parse.quote(f"source={EVENT_SOURCE}")
    events = get(f"/api/v1/namespaces/{EVENT_NAMESPACE}/events?fieldSelector={selector}")
    recorded = {r.node for r in records}
    named = {str((e.get("involvedObject") or {}).get("name")) for e in (events or {}).get("items") or []
             if isinstance(e, dict) and (e.get("source") or {}).get("component") == EVENT_SOURCE}
    return ClusterVerdicts(records, sorted(n for n in named - recorded if n != "None"))
