"""checkov's kubernetes framework over every Kubernetes object aksgpu declares (run_checkov.py's
--framework kubernetes): every example environment and every preset is planned offline, its objects
are written as YAML as `aksgpu plan --manifests` writes them, and checkov judges each target's
folder. Each finding must be waived in tests/checkov_kubernetes_waivers.yaml with its reason, or be
one of aksgpu's documented policy exceptions on that object; a waiver nothing matches fails too."""

from __future__ import annotations

import fnmatch
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from aksgpu.plan.manifests import write_manifests  # noqa: E402
from aksgpu.plan.planner import Plan, plan_stack  # noqa: E402
from aksgpu.project.stackfile import resolve_stack  # noqa: E402
from tests.helpers import EXAMPLE, EXAMPLES, FLEET_EXAMPLE, base_spec, edit, plan_spec, preset_spec  # noqa: E402

WAIVERS = Path(__file__).resolve().parent / "checkov_kubernetes_waivers.yaml"
EXCEPTION_PREFIX = "policy.aksgpu.io/"


def plans() -> dict[str, Plan]:
    """Name -> plan of every example environment (the fleet's stacks each), every preset, and the
    objects of what is off by default (the repair loop, the bundled Prometheus)."""
    found = {f"example {env}": plan_stack(resolve_stack(env, cwd=EXAMPLE)) for env in EXAMPLES}
    for stack_file in sorted((FLEET_EXAMPLE / "stacks").glob("Pulumi.*.yaml")):
        stack = resolve_stack(str(stack_file))
        if not stack.is_fleet_upgrades:
            found[f"fleet {stack.stack}"] = plan_stack(stack)
    for preset in ("dev", "inference", "training", "fleet"):
        found[f"preset {preset}"] = plan_spec(preset_spec(preset))
    # The repair loop is off by default: its objects (gpuHealth.repair mode act) as a variant.
    found["variant repair"] = plan_spec(edit(base_spec(), "gpuHealth.repair", {"enabled": True, "mode": "act"}))
    # No example or preset runs the bundled Prometheus; its NetworkPolicies are judged here.
    bundled = edit(preset_spec("dev"), "gpuHealth.metrics.scraper", "bundled")
    bundled["nodePools"].append({"name": "cpu", "vmSize": "Standard_D8ds_v5", "count": 1})
    found["variant dev with the bundled Prometheus"] = plan_spec(bundled)
    return found


def object_exceptions(folder: Path) -> dict[str, set[str]]:
    """checkov's id of each object (Kind.namespace.name) -> the aksgpu rules it documents an exception to."""
    found: dict[str, set[str]] = {}
    for path in folder.rglob("*.yaml"):
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if not isinstance(document, dict) or "kind" not in document:
                continue
            meta = document.get("metadata") or {}
            key = f"{document['kind']}.{meta.get('namespace', 'default')}.{meta.get('name')}"
            found[key] = {name.removeprefix(EXCEPTION_PREFIX) for name in (meta.get("annotations") or {})
                          if name.startswith(EXCEPTION_PREFIX)}
    return found


def judge(failed: list[dict[str, Any]], exceptions: dict[str, set[str]], waivers: dict[str, Any],
          used: set[int]) -> list[str]:
    """The findings neither an object's documented exception nor a waiver covers (marking the waivers used)."""
    problems = []
    for finding in failed:
        check, resource = finding["check_id"], finding["resource"]
        obj = ".".join(resource.split(".")[:3])
        rule = waivers["byException"].get(check)
        if rule and rule in exceptions.get(obj, set()):
            continue
        matched = [index for index, waiver in enumerate(waivers["waivers"]) if waiver["check"] == check
                   and any(fnmatch.fnmatchcase(obj, pattern) for pattern in waiver["objects"])]
        if matched:
            used.update(matched)
            continue
        problems.append(f"{obj}: {check} ({finding['check_name']}) is neither waived nor a documented exception")
    return problems


def run(checkov: str) -> int:
    waivers = yaml.safe_load(WAIVERS.read_text(encoding="utf-8"))
    problems: list[str] = []
    used: set[int] = set()
    with tempfile.TemporaryDirectory() as root:
        folders = {}
        for name, plan in plans().items():
            folders[name] = Path(root) / name.replace(" ", "-")
            write_manifests(plan, folders[name])
        # One checkov run over every target's folder (one start-up, not eleven).
        result = subprocess.run([checkov, "-d", root, "--framework", "kubernetes", "-o", "json", "--quiet",
                                 "--skip-download"], capture_output=True, text=True, check=False)
        reports = json.loads(result.stdout) if result.stdout.strip() else []
        reports = reports if isinstance(reports, list) else [reports]
        failed = [check for report in reports for check in report.get("results", {}).get("failed_checks", [])]
        for name, folder in folders.items():
            prefix = "/" + folder.name + "/"
            mine = [finding for finding in failed if finding["file_path"].startswith(prefix)]
            print(f"{name}: {len(mine)} failed ({', '.join(sorted({f['check_id'] for f in mine})) or 'none'})")
            problems += [f"{name}: {problem}" for problem in judge(mine, object_exceptions(folder), waivers, used)]
        if any(report.get("summary", {}).get("parsing_errors") for report in reports):
            problems.append("checkov could not parse some manifests")
        if not reports:
            problems.append(f"checkov printed no report: {result.stderr[-2000:]}")
    problems += [f"waiver {waiver['check']} {waiver['objects']} matches no finding any more; remove it"
                 for index, waiver in enumerate(waivers["waivers"]) if index not in used]
    for problem in problems:
        print(f"FAIL {problem}", file=sys.stderr)
    return 1 if problems else 0
