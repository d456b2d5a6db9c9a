"""Tests of the Azure OpenAPI oracle itself (tests/oracles/azure_openapi.py).

The oracle is only worth trusting if (1) every request body Azure publishes as an example for
the two PUTs passes it, and (2) each kind of mistake it claims to catch is caught, at the right
JSON path.  The specs live outside the repository, in the sibling folder ../shared/specs.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any, Callable

import pytest

try:  # repo root on sys.path (e.g. `python -m pytest` from the root, or tests/ is a package)
    from tests.oracles.azure_openapi import (
        EXTENSIBLE_ENUM_NOTE,
        SECRET,
        UNKNOWN,
        AksOpenApi,
    )
except ModuleNotFoundError:  # pytest's default rootdir-less import: tests/ itself on sys.path
    from oracles.azure_openapi import EXTENSIBLE_ENUM_NOTE, SECRET, UNKNOWN, AksOpenApi

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED = REPO_ROOT.parent / "shared"
SPECS = SHARED / "specs"
if not SPECS.is_dir():
    pytest.skip(f"Azure OpenAPI specs not found at {SPECS}", allow_module_level=True)

API_DIR = (
    SPECS / "azure-rest-api/containerservice/resource-manager/Microsoft.ContainerService"
    / "aks/stable/2025-09-01"
)
PATH_PARAMS = ("resourceGroupName", "resourceName", "agentPoolName")


def _put_examples() -> list[tuple[str, Path]]:
    """(kind, file) of every example present that the spec lists under one of the two PUTs."""
    spec = json.loads((API_DIR / "managedClusters.json").read_text(encoding="utf-8"))
    kinds = {"ManagedClusters_CreateOrUpdate": "cluster", "AgentPools_CreateOrUpdate": "pool"}
    found = []
    for path_item in spec["paths"].values():
        for op in path_item.values():
            kind = kinds.get(op.get("operationId")) if isinstance(op, dict) else None
            for example in (op.get("x-ms-examples", {}) if kind else {}).values():
                file = (API_DIR / example["$ref"]).resolve()
                if file.is_file():  # the shared copy holds only a few of the listed examples
                    found.append((kind, file))
    return sorted(found, key=lambda kf: kf[1].name)


PUT_EXAMPLES = _put_examples()


def example_to_inputs(file: Path) -> dict[str, Any]:
    """ARM example request -> Pulumi inputs: hoist `properties.*`, add the path parameters."""
    params = json.loads(file.read_text(encoding="utf-8"))["parameters"]
    body = params["parameters"]
    inputs = {k: params[k] for k in PATH_PARAMS if k in params}
    inputs.update({k: v for k, v in body.items() if k != "properties"})
    inputs.update(body.get("properties", {}))
    return inputs


# Inputs shaped like what aksgpu sends: a small cluster and a GPU spot pool.
BASE_CLUSTER: dict[str, Any] = {
    "resourceGroupName": "rg-aksgpu",
    "resourceName": "aksgpu-dev",
    "location": "westeurope",
    "tags": {"project": "aksgpu"},
    "sku": {"name": "Base", "tier": "Standard"},
    "identity": {"type": "SystemAssigned"},
    "dnsPrefix": "aksgpu",
    "kubernetesVersion": "1.31",
    "enableRBAC": True,
    "agentPoolProfiles": [
        {
            "name": "system",
            "mode": "System",
            "count": 1,
            "vmSize": "Standard_D4s_v5",
            "osType": "Linux",
            "osDiskType": "Managed",
            "osDiskSizeGB": 128,
            "type": "VirtualMachineScaleSets",
        }
    ],
    "networkProfile": {
        "networkPlugin": "azure",
        "networkPluginMode": "overlay",
        "podCidr": "10.244.0.0/16",
        "serviceCidr": "10.0.0.0/16",
        "dnsServiceIP": "10.0.0.10",
    },
    "linuxProfile": {
        "adminUsername": "azureuser",
        "ssh": {"publicKeys": [{"keyData": "ssh-rsa AAAA"}]},
    },
    "addonProfiles": {"omsagent": {"enabled": False}},
}
BASE_POOL: dict[str, Any] = {
    "resourceGroupName": "rg-aksgpu",
    "resourceName": "aksgpu-dev",
    "agentPoolName": "gpu",
    "count": 1,
    "vmSize": "Standard_NC24ads_A100_v4",
    "osType": "Linux",
    "mode": "User",
    "osDiskType": "Ephemeral",
    "osDiskSizeGB": 128,
    "enableAutoScaling": True,
    "minCount": 0,
    "maxCount": 2,
    "scaleSetPriority": "Spot",
    "scaleSetEvictionPolicy": "Delete",
    "spotMaxPrice": -1,
    "nodeLabels": {"accelerator": "nvidia"},
    "nodeTaints": ["nvidia.com/gpu=present:NoSchedule"],
    "gpuProfile": {"driver": "Install"},
    "upgradeSettings": {"maxSurge": "1", "drainTimeoutInMinutes": 30},
}


@pytest.fixture(scope="module")
def oracle() -> AksOpenApi:
    return AksOpenApi.load(SHARED)


def validate(oracle: AksOpenApi, kind: str, mutate: Callable[[dict], Any]) -> list[str]:
    """Validate a mutated deep copy of the base inputs of `kind` ("cluster" or "pool")."""
    inputs = copy.deepcopy(BASE_CLUSTER if kind == "cluster" else BASE_POOL)
    mutate(inputs)
    if kind == "cluster":
        return oracle.validate_managed_cluster(inputs)
    return oracle.validate_agent_pool(inputs)


def pool0(inputs: dict) -> dict:
    return inputs["agentPoolProfiles"][0]


# ---- the oracle accepts what Azure publishes, and our bases --------------------------------


def test_base_inputs_are_valid(oracle: AksOpenApi) -> None:
    # Precondition of every mutation test below: only the mutation can cause a problem.
    assert oracle.validate_managed_cluster(copy.deepcopy(BASE_CLUSTER)) == []
    assert oracle.validate_agent_pool(copy.deepcopy(BASE_POOL)) == []


def test_examples_cover_both_puts() -> None:
    kinds = [kind for kind, _ in PUT_EXAMPLES]
    assert kinds.count("cluster") >= 1 and kinds.count("pool") >= 1, PUT_EXAMPLES


@pytest.mark.parametrize("kind,file", PUT_EXAMPLES, ids=[f.stem for _, f in PUT_EXAMPLES])
def test_example_request_validates(oracle: AksOpenApi, kind: str, file: Path) -> None:
    inputs = example_to_inputs(file)
    if kind == "cluster":
        problems = oracle.validate_managed_cluster(inputs)
    else:
        problems = oracle.validate_agent_pool(inputs)
    # Spec quirk: some examples use values that extensible (modelAsString) enums no longer list
    # (sku.name "Basic"); Azure's example validation tolerates those, so only they are excused.
    assert [p for p in problems if not p.endswith(EXTENSIBLE_ENUM_NOTE)] == []


def test_stale_example_enum_value_is_still_reported(oracle: AksOpenApi) -> None:
    # Extensible enums are still enforced: a plan sending "Basic" would be a real bug.
    problems = oracle.validate_managed_cluster(
        example_to_inputs(API_DIR / "examples/ManagedClustersCreate_Update.json")
    )
    assert len(problems) == 1 and problems[0].startswith("sku.name: 'Basic'"), problems
    assert problems[0].endswith(EXTENSIBLE_ENUM_NOTE)


# ---- each kind of mistake is caught at the right path ---------------------------------------

def _case(id_: str, kind: str, mutate: Callable[[dict], Any], *expect: str) -> Any:
    return pytest.param(kind, mutate, *expect, id=id_)


# (id, kind, mutation, path of the expected problem, fragment of its message)
MUTATIONS = [
    _case(
        "unknown-top",
        "cluster",
        lambda i: i.update(bogusSetting=1),
        "properties.bogusSetting",
        "unknown property",
    ),
    _case(
        "unknown-nested",
        "cluster",
        lambda i: pool0(i).update(gpuDriver="Install"),
        "properties.agentPoolProfiles[0].gpuDriver",
        "unknown property",
    ),
    _case(
        "unknown-pool",
        "pool",
        lambda i: i["gpuProfile"].update(mig="x"),
        "properties.gpuProfile.mig",
        "unknown property",
    ),
    _case(
        "enum",
        "cluster",
        lambda i: pool0(i).update(osDiskType="Premium"),
        "properties.agentPoolProfiles[0].osDiskType",
        "'Premium' is not one of",
    ),
    _case(
        "enum-case",
        "cluster",
        lambda i: i["networkProfile"].update(networkPlugin="Azure"),
        "properties.networkProfile.networkPlugin",
        "enum",
    ),
    _case(
        "enum-closed",
        "cluster",
        lambda i: i["identity"].update(type="systemAssigned"),
        "identity.type",
        "(enum)",
    ),
    _case(
        "enum-pool",
        "pool",
        lambda i: i["gpuProfile"].update(driver="install"),
        "properties.gpuProfile.driver",
        EXTENSIBLE_ENUM_NOTE,
    ),
    _case(
        "pattern-path",
        "pool",
        lambda i: i.update(agentPoolName="Bad_Name"),
        "agentPoolName",
        "does not match pattern",
    ),
    _case(
        "pattern-name",
        "cluster",
        lambda i: pool0(i).update(name="Bad_Name"),
        "properties.agentPoolProfiles[0].name",
        "does not match pattern",
    ),
    _case(
        "pattern-cidr",
        "cluster",
        lambda i: i["networkProfile"].update(podCidr="10.244.0.0/33"),
        "properties.networkProfile.podCidr",
        "does not match pattern",
    ),
    _case(
        "maximum",
        "pool",
        lambda i: i.update(osDiskSizeGB=5000),
        "properties.osDiskSizeGB",
        "above maximum 2048",
    ),
    _case(
        "minimum",
        "cluster",
        lambda i: pool0(i).update(osDiskSizeGB=-1),
        "properties.agentPoolProfiles[0].osDiskSizeGB",
        "below minimum 0",
    ),
    _case(
        "minimum-nested",
        "pool",
        lambda i: i["upgradeSettings"].update(drainTimeoutInMinutes=0),
        "properties.upgradeSettings.drainTimeoutInMinutes",
        "below minimum 1",
    ),
    _case(
        "type-int",
        "pool",
        lambda i: i.update(count="3"),
        "properties.count",
        "not of type 'integer'",
    ),
    _case(
        "type-float",
        "pool",
        lambda i: i.update(count=3.5),
        "properties.count",
        "not of type 'integer'",
    ),
    _case(
        "type-bool",
        "pool",
        lambda i: i.update(enableAutoScaling="true"),
        "properties.enableAutoScaling",
        "not of type 'boolean'",
    ),
    _case(
        "type-number",
        "pool",
        lambda i: i.update(spotMaxPrice="cheap"),
        "properties.spotMaxPrice",
        "not of type 'number'",
    ),
    _case(
        "type-array",
        "cluster",
        lambda i: i.update(agentPoolProfiles={"name": "x"}),
        "properties.agentPoolProfiles",
        "not of type 'array'",
    ),
    _case(
        "type-map-value",
        "cluster",
        lambda i: i["tags"].update(env=1),
        'tags["env"]',
        "not of type 'string'",
    ),
    _case(
        "readonly",
        "pool",
        lambda i: i.update(provisioningState="Succeeded"),
        "properties.provisioningState",
        "readOnly",
    ),
    _case(
        "readonly-nested",
        "cluster",
        lambda i: pool0(i).update(provisioningState="Succeeded"),
        "properties.agentPoolProfiles[0].provisioningState",
        "readOnly",
    ),
    _case(
        "readonly-top",
        "cluster",
        lambda i: i["identity"].update(principalId="0000"),
        "identity.principalId",
        "readOnly",
    ),
    _case(
        "readonly-ref-sibling",
        "cluster",
        lambda i: i.update(powerState={"code": "Running"}),
        "properties.powerState",
        "readOnly",
    ),
    _case(
        "required-name",
        "cluster",
        lambda i: pool0(i).pop("name"),
        "properties.agentPoolProfiles[0].name",
        "required property is missing",
    ),
    _case(
        "required-nested",
        "cluster",
        lambda i: i["linuxProfile"].pop("ssh"),
        "properties.linuxProfile.ssh",
        "required property is missing",
    ),
    _case(
        "required-allOf-parent",
        "cluster",
        lambda i: i.pop("location"),
        "location",
        "required property is missing",
    ),
    _case(
        "required-map-value",
        "cluster",
        lambda i: i["addonProfiles"].update(azurepolicy={}),
        'properties.addonProfiles["azurepolicy"].enabled',
        "required property is missing",
    ),
    _case(
        "path-pattern",
        "cluster",
        lambda i: i.update(resourceName="bad name"),
        "resourceName",
        "does not match pattern",
    ),
    _case(
        "path-maxLength",
        "cluster",
        lambda i: i.update(resourceGroupName="r" * 91),
        "resourceGroupName",
        "longer than maxLength 90",
    ),
    _case(
        "path-minLength",
        "cluster",
        lambda i: i.update(resourceGroupName=""),
        "resourceGroupName",
        "shorter than minLength 1",
    ),
    _case(
        "path-missing",
        "pool",
        lambda i: i.pop("agentPoolName"),
        "agentPoolName",
        "required path parameter is missing",
    ),
    _case(
        "maxItems",
        "cluster",
        lambda i: i.update(
            ingressProfile={"webAppRouting": {"dnsZoneResourceIds": [f"z{n}" for n in range(6)]}}
        ),
        "properties.ingressProfile.webAppRouting.dnsZoneResourceIds",
        "more than maxItems 5",
    ),
    _case(
        "uniqueItems",
        "cluster",
        lambda i: i.update(
            serviceMeshProfile={"mode": "Istio", "istio": {"revisions": ["asm-1-24"] * 2}}
        ),
        "properties.serviceMeshProfile.istio.revisions",
        "uniqueItems",
    ),
    _case(
        "placeholder-key-still-checked",
        "pool",
        lambda i: i.update(bogus=UNKNOWN),
        "properties.bogus",
        "unknown property",
    ),
]


@pytest.mark.parametrize("kind,mutate,path,fragment", MUTATIONS)
def test_mutation_is_reported_at_its_path(
    oracle: AksOpenApi, kind: str, mutate: Callable[[dict], Any], path: str, fragment: str
) -> None:
    problems = validate(oracle, kind, mutate)
    assert problems, "mutation was not detected"
    # Every problem is about the mutated place (the base is valid), and says what broke.
    assert all(p.startswith(f"{path}: ") for p in problems), problems
    assert any(fragment in p for p in problems), problems


def test_problem_names_path_value_and_rule(oracle: AksOpenApi) -> None:
    problems = validate(oracle, "pool", lambda i: i.update(osDiskType="Premium"))
    assert problems == [
        "properties.osDiskType: 'Premium' is not one of ['Managed', 'Ephemeral'] "
        + EXTENSIBLE_ENUM_NOTE
    ]


# ---- wire-format leniencies: integral floats and plan placeholders --------------------------

ACCEPTED = [
    _case(
        "integral-float",
        "pool",
        lambda i: i.update(count=3.0, minCount=0.0, osDiskSizeGB=128.0),
    ),
    _case(
        "integral-float-nested",
        "cluster",
        lambda i: pool0(i).update(count=3.0, osDiskSizeGB=2048.0),
    ),
    _case("non-integral-number", "pool", lambda i: i.update(spotMaxPrice=0.5)),
    _case(
        "unknown-path-param",
        "pool",
        lambda i: i.update(agentPoolName=UNKNOWN, resourceName=UNKNOWN),
    ),
    _case("unknown-pattern-string", "cluster", lambda i: pool0(i).update(name=UNKNOWN)),
    _case("unknown-pattern-cidr", "cluster", lambda i: i["networkProfile"].update(podCidr=UNKNOWN)),
    _case("unknown-integer", "pool", lambda i: i.update(count=UNKNOWN)),
    _case("unknown-enum", "pool", lambda i: i.update(osDiskType=UNKNOWN)),
    _case("secret-required-object", "cluster", lambda i: i["linuxProfile"].update(ssh=SECRET)),
    _case("unknown-whole-list", "cluster", lambda i: i.update(agentPoolProfiles=UNKNOWN)),
    _case("secret-whole-object", "cluster", lambda i: i.update(linuxProfile=SECRET)),
    _case(
        "secret-list-item",
        "cluster",
        lambda i: i["linuxProfile"]["ssh"]["publicKeys"].append(SECRET),
    ),
    _case("secret-map-value", "cluster", lambda i: i["addonProfiles"].update(azurepolicy=SECRET)),
]


@pytest.mark.parametrize("kind,mutate", ACCEPTED)
def test_wire_format_values_are_accepted(
    oracle: AksOpenApi, kind: str, mutate: Callable[[dict], Any]
) -> None:
    assert validate(oracle, kind, mutate) == []


# ---- loading --------------------------------------------------------------------------------


def test_load_is_fast_and_validation_repeatable() -> None:
    start = time.perf_counter()
    fresh = AksOpenApi.load(SHARED)
    assert time.perf_counter() - start < 1.0
    inputs = copy.deepcopy(BASE_POOL) | {"count": 3.5}
    first = fresh.validate_agent_pool(inputs)
    assert first and fresh.validate_agent_pool(inputs) == first
    assert inputs["count"] == 3.5 and "properties" not in inputs  # inputs are not modified


def test_load_without_specs_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        AksOpenApi.load(tmp_path)
