"""Run checkov, a public security checker no one here wrote, over what aksgpu would send to Azure.

Every example environment and every preset is planned offline, its Azure bodies are written as an
ARM template (tests/arm_template.py), and checkov's `arm` framework judges them. Each finding must
be one listed below with its reason: checks where checkov and the AKS API disagree, or where
aksgpu deliberately differs, and, for development targets, the relaxations their preset waives in
aksgpu's own policy pack. A finding not listed fails the run, and so does a listed finding that no
longer occurs (so the list stays true).

    .venv/bin/python tests/run_checkov.py --checkov PATH/TO/checkov
    .venv/bin/python tests/run_checkov.py --checkov PATH/TO/checkov --framework kubernetes

.ci/run installs checkov in its own virtualenv (its dependencies clash with the test
environment's) and runs this. Offline: --skip-download keeps checkov from calling its platform.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from aksgpu.plan.planner import plan_stack  # noqa: E402
from aksgpu.project.stackfile import resolve_stack  # noqa: E402
from tests.arm_template import arm_template  # noqa: E402
from tests.helpers import EXAMPLE, EXAMPLES, FLEET_EXAMPLE, plan_spec, preset_spec  # noqa: E402

# Findings on every target, with why aksgpu does not follow checkov there.
EVERYWHERE = {
    "CKV_AZURE_6": "API server authorized IP ranges: the hardened targets have a private API server, for which "
                   "AKS takes no authorized ranges; checkov's ARM form has no exception for private clusters "
                   "(its Terraform form does). aksgpu's aks-api-server-access accepts either; the dev preset's "
                   "public API server without ranges is waived there.",
    "CKV_AZURE_8": "Kubernetes dashboard: checkov wants addonProfiles.kubeDashboard.enabled: false written out; "
                   "the add-on no longer exists on supported Kubernetes versions and aksgpu does not send it.",
    "CKV_AZURE_172": "Secret rotation: checkov's ARM check wants the boolean true, where the API's add-on config "
                     "takes strings and aksgpu sends \"true\" (as PSRule's Azure.AKS.SecretStoreRotation wants).",
    "CKV_AZURE_166": "Image quarantine: with quarantine on, a pushed image cannot be pulled until a scanner marks "
                     "it verified; aksgpu deploys no such scanner, so quarantine would block every new image. "
                     "Defender for Containers scans registry images instead.",
}
# The development targets' registry, whose relaxations their preset waives in aksgpu's pack.
DEV_REGISTRY = {
    "CKV_AZURE_139": "public network access: waived in the dev preset (acr-public-network)",
    "CKV_AZURE_233": "zone redundancy: waived in the dev preset (acr-zone-redundancy)",
    "CKV_AZURE_163": "vulnerability scanning needs Premium: waived in the dev preset (acr-premium)",
}


# A fleet's members leave upgrades to Fleet Manager (docs/guides/fleets.md), waived in their specs.
FLEET_MEMBER = {
    "CKV_AZURE_171": "automatic upgrades: Fleet Manager's auto-upgrade profiles upgrade a fleet member stage by "
                     "stage, and its AKS channel is off so the two do not race (Fleet Manager's FAQ); waived in "
                     "the member's spec (aks-auto-upgrade)",
}


def targets() -> dict[str, dict]:
    """Name -> ARM template of every example environment (a fleet's stacks each) and every preset."""
    found = {f"example {env}": arm_template(plan_stack(resolve_stack(env, cwd=EXAMPLE))) for env in EXAMPLES}
    for stack_file in sorted((FLEET_EXAMPLE / "stacks").glob("Pulumi.*.yaml")):
        stack = resolve_stack(str(stack_file))
        if stack.is_fleet_upgrades:
            continue  # Fleet Manager's strategy and profiles: no type checkov's ARM checks read
        kind = "fleet" if stack.is_fleet else "fleet member"
        found[f"{kind} {stack.stack}"] = arm_template(plan_stack(stack))
    for preset in ("dev", "inference", "training", "fleet"):
        found[f"preset {preset}"] = arm_template(plan_spec(preset_spec(preset)))
    return found


# The resource type each finding of EVERYWHERE is about: a fleet's shared stack has no cluster,
# and a fleet member uses the fleet's registry.
NEEDS_TYPE = {"CKV_AZURE_6": "Microsoft.ContainerService/managedClusters",
              "CKV_AZURE_8": "Microsoft.ContainerService/managedClusters",
              "CKV_AZURE_172": "Microsoft.ContainerService/managedClusters",
              "CKV_AZURE_166": "Microsoft.ContainerRegistry/registries"}


def expected(name: str, template: dict) -> dict[str, str]:
    types = {resource["type"] for resource in template["resources"]}
    allowed = {check: reason for check, reason in EVERYWHERE.items() if NEEDS_TYPE[check] in types}
    if name.endswith(" dev"):
        allowed |= DEV_REGISTRY
    if name.startswith("fleet member "):
        allowed |= FLEET_MEMBER
    return allowed


def run(checkov: str) -> int:
    problems: list[str] = []
    with tempfile.TemporaryDirectory() as folder:
        paths = {}
        for name, template in targets().items():
            paths[name] = Path(folder) / (name.replace(" ", "-") + ".json")
            paths[name].write_text(json.dumps(template, indent=1), encoding="utf-8")
        # One checkov run over every target's template (one start-up, not ten); without --quiet, the
        # report lists the passed checks too, each with its file.
        result = subprocess.run([checkov, "-d", folder, "--framework", "arm", "-o", "json", "--skip-download"],
                                capture_output=True, text=True, check=False)
        if not result.stdout.strip():
            print(f"FAIL checkov printed no report: {result.stderr[-2000:]}", file=sys.stderr)
            return 1
        report = json.loads(result.stdout)
        results = report["results"]
        counted = 0
        for name, path in paths.items():
            template = json.loads(path.read_text(encoding="utf-8"))
            mine = "/" + path.name
            passed = [check for check in results.get("passed_checks", []) if check["file_path"] == mine]
            failed = sorted({check["check_id"] for check in results["failed_checks"] if check["file_path"] == mine})
            failures = sum(check["file_path"] == mine for check in results["failed_checks"])
            counted += len(template["resources"])
            allowed = expected(name, template)
            print(f"{name}: {len(template['resources'])} resources, {len(passed)} passed, "
                  f"{failures} failed ({', '.join(failed) or 'none'})")
            problems += [f"{name}: {check} is not an expected finding" for check in failed if check not in allowed]
            problems += [f"{name}: {check} no longer fails; remove it from the expected findings"
                         for check in allowed if check not in failed]
        summary = report["summary"]
        if summary["parsing_errors"] or results.get("parsing_errors"):
            problems.append(f"checkov could not parse {results.get('parsing_errors')}")
        if summary["resource_count"] != counted:
            problems.append(f"checkov read {summary['resource_count']} resources where the templates hold {counted}")
    print()
    print("Expected findings and why:")
    for check, reason in {**EVERYWHERE, **DEV_REGISTRY, **FLEET_MEMBER}.items():
        print(f"  {check}: {reason}")
    for problem in problems:
        print(f"FAIL {problem}", file=sys.stderr)
    return 1 if problems else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkov", default="checkov", help="the checkov executable")
    parser.add_argument("--framework", choices=("arm", "kubernetes"), default="arm",
                        help="arm: the Azure bodies (default); kubernetes: every Kubernetes object "
                             "(tests/run_checkov_kubernetes.py, waivers in tests/checkov_kubernetes_waivers.yaml)")
    args = parser.parse_args()
    if args.framework == "kubernetes":
        from tests.run_checkov_kubernetes import run as run_kubernetes
        return run_kubernetes(args.checkov)
    return run(args.checkov)


if __name__ == "__main__":
    sys.exit(main())
