"""aksgpu/components/sdk_modules.py: the provider SDKs' packages load one module per class used,
and read the same as the SDK's eager packages (each in a fresh process: the partial packages are
per process)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import EXAMPLE, REPO

# The names a program reads, and what each is: its module and its name there.
PROBE = '''
import json, sys
{setup}
import pulumi_azure_native as azure, pulumi_kubernetes as k8s
names = {{
    "VirtualNetwork": azure.network.VirtualNetwork, "PublicIPAddress": azure.network.PublicIPAddress,
    "SubResourceArgs": azure.network.SubResourceArgs, "VirtualNetworkInitArgs": azure.network.VirtualNetworkInitArgs,
    "outputs": azure.network.outputs, "AgentPoolMode": azure.containerservice.AgentPoolMode,
    "list_creds": azure.containerservice.list_managed_cluster_user_credentials_output,
    "ConfigMap": k8s.core.v1.ConfigMap, "ObjectMetaArgs": k8s.meta.v1.ObjectMetaArgs,
    "CustomResource": k8s.apiextensions.CustomResource, "Release": k8s.helm.v3.Release,
}}
found = {{key: [getattr(value, "__module__", None) or value.__name__, getattr(value, "__qualname__", "")]
          for key, value in names.items()}}
# A name no module gives: the package's own __init__ runs, every module as without this.
assert getattr(azure.network, "NoSuchName", None) is None
every = sorted(name for name in dir(azure.network) if not name.startswith("_"))
print(json.dumps({{"found": found, "every": every}}))
'''


def _probe(setup: str) -> dict:
    result = subprocess.run([sys.executable, "-c", PROBE.format(setup=setup)], capture_output=True, text=True,
                            check=True, cwd=REPO)
    return json.loads(result.stdout)


@pytest.mark.slow
def test_a_partial_package_reads_as_the_eager_one() -> None:
    partial = _probe("from aksgpu.components.sdk_modules import load_by_class; load_by_class()")
    eager = _probe("")
    assert partial["found"] == eager["found"]
    assert partial["found"]["ConfigMap"] == ["pulumi_kubernetes.core.v1.ConfigMap", "ConfigMap"]
    assert partial["found"]["outputs"][0] == "pulumi_azure_native.network.outputs"
    # After a name found nowhere: the eager package's names, all of them.
    assert partial["every"] == eager["every"]


def test_a_plan_loads_the_modules_of_the_classes_it_declares_and_no_others(tmp_path) -> None:
    """The example prod stack declares five network types; the eager package loads ~290 modules."""
    code = f'''
import sys
from aksgpu.plan.planner import plan_stack
from aksgpu.project.stackfile import StackFile, resolve_stack
import os
os.chdir({str(EXAMPLE)!r})
plan = plan_stack(resolve_stack("stacks/Pulumi.prod.yaml"))
full = sorted(name for name, module in sys.modules.items()
              if name.startswith(("pulumi_azure_native.", "pulumi_kubernetes.")) and hasattr(module, "__path__")
              and type(module).__name__ == "module")
network = [name for name in sys.modules if name.startswith("pulumi_azure_native.network.")]
print(len(plan.by_type("azure-native:network:VirtualNetwork")), len(network), full)
'''
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    declared, network_modules, fully_loaded = result.stdout.split(" ", 2)
    assert declared == "1"
    assert int(network_modules) < 20, result.stdout
    assert fully_loaded.strip() == "[]", result.stdout
