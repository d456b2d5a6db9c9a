"""The Kubernetes APIs aksgpu declares objects of, against the cluster's Kubernetes version (issue 26):
a 1.29 plan declared admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy, served from 1.30.

Every object the planner declares, for every example, preset and test variant, must have a row in
catalog/kubernetes_apis.yaml, be one spec/kubernetes_apis.py derives from the spec, and be served by
the spec's version (or, left to AKS, every version AKS supports); each row's minimum is checked
against kubernetes-validate's per-release schema sets."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from aksgpu import catalog
from aksgpu.catalog.kubernetes_apis import KubernetesApi, kubernetes_apis, minor_of
from aksgpu.environments.presets import preset_names
from aksgpu.plan.planner import Plan
from aksgpu.spec import ClusterSpec, SpecError, parse_cluster_spec
from aksgpu.spec.kubernetes_apis import check_kubernetes_apis, declared_apis
from tests.helpers import EXAMPLE, base_spec, edit, kubernetes_manifests, preset_spec, shared_plan
from tests.oracles.kubernetes import validate_object
from tests.test_kubernetes_objects import VARIANTS

# kubernetes-validate's schema sets (kubernetes_validate/kubernetes-json-schema/v1.N.0-local-strict).
SCHEMA_MINORS = [(1, minor) for minor in range(25, 38)]


def _supported() -> list[tuple[int, int]]:
    """Every minor AKS supports as of aks_versions.yaml's date, on either support plan."""
    table = catalog.load("aks_versions")
    return sorted({minor_of(v) for plan in ("community", "lts") for v, end in table[plan].items()
                   if end >= table["checked"]})


def _oldest_supported_lts() -> str:
    table = catalog.load("aks_versions")
    oldest = min((minor_of(v) for v, end in table["lts"].items() if end >= table["checked"]))
    return f"{oldest[0]}.{oldest[1]}"


def _text(minor: tuple[int, int]) -> str:
    return f"{minor[0]}.{minor[1]}"


@pytest.fixture(scope="module")
def specs_and_plans(example_plans: dict[str, Plan]) -> dict[str, tuple[dict[str, Any], Plan]]:
    from aksgpu.project.stackfile import resolve_stack

    found = {f"variant {name}": (spec, shared_plan(spec)) for name, spec in VARIANTS.items()}
    found |= {f"preset {name}": (preset_spec(name), shared_plan(preset_spec(name))) for name in preset_names()}
    found |= {f"example {env}": (resolve_stack(env, cwd=EXAMPLE).cluster, plan) for env, plan in example_plans.items()}
    return found


@pytest.mark.slow
def test_every_declared_object_has_a_row_the_spec_derives_and_its_version_serves(
        specs_and_plans: dict[str, tuple[dict[str, Any], Plan]]) -> None:
    table = kubernetes_apis()
    seen: set[tuple[str, str]] = set()
    for name, (raw, plan) in specs_and_plans.items():
        spec, _ = parse_cluster_spec(raw)
        derived = declared_apis(spec)
        pinned = spec.control_plane.kubernetes_version
        versions = [minor_of(pinned)] if pinned else _supported()
        for obj in kubernetes_manifests(plan):
            key = (obj["apiVersion"], obj["kind"])
            seen.add(key)
            assert key in table, (f"{name}: aksgpu declares {obj['kind']} ({obj['apiVersion']}) with no row in "
                                  "catalog/kubernetes_apis.yaml: add it with the version that serves it and a source")
            api = table[key]
            if api.since is None:
                assert api.provided_by, key  # a custom resource says which chart or add-on serves it
                continue
            assert key in derived, f"{name}: spec/kubernetes_apis.py declared_apis misses {key}"
            for version in versions:
                assert api.since <= version, f"{name}: {api.name} needs {api.since_text}, the spec has {version}"
    # The objects seen cover the admission policies (the bug's API) and every kind both ways.
    assert ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy") in seen
    assert {k for k, a in table.items() if a.since is None} & seen and {k for k, a in table.items() if a.since} & seen


def _served(api: KubernetesApi, minor: tuple[int, int]) -> bool:
    obj = {"apiVersion": api.api_version, "kind": api.kind, "metadata": {"name": "x"}}
    try:
        kubernetes_validate.validate(obj, f"{_text(minor)}.0", strict=True)
    except kubernetes_validate.SchemaNotFoundError:
        return False
    except kubernetes_validate.ValidationError:
        pass  # a required field missing: the schema is there
    return True


@pytest.mark.parametrize("key", sorted(k for k, a in kubernetes_apis().items() if a.since), ids=lambda k: k[1])
def test_each_minimum_is_the_first_schema_set_that_serves_the_api(key: tuple[str, str]) -> None:
    api = kubernetes_apis()[key]
    assert api.since is not None
    floor = minor_of(catalog.load("kubernetes_apis")["floor"])
    for minor in SCHEMA_MINORS:
        expected = minor >= api.since
        assert _served(api, minor) == expected, f"{api.name} on {_text(minor)}: table says since {api.since_text}"
    assert api.since <= floor or api.since in SCHEMA_MINORS  # a minimum above the floor is one the sets check


def test_the_kubernetes_version_must_serve_the_apis_the_spec_declares() -> None:
    """The bug: 1.29 with the in-cluster layer's ValidatingAdmissionPolicy (served from 1.30)."""
    spec = ClusterSpec.model_validate(edit(base_spec(), "controlPlane.kubernetesVersion", "1.29"))
    [issue] = list(check_kubernetes_apis(spec))
    assert issue.path == "controlPlane.kubernetesVersion" and issue.value == "1.29" and issue.severity == "error"
    assert "ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1) from 1.30" in issue.rule
    assert "inCluster.enabled" in issue.rule and '"1.30" or later' in issue.fix
    assert "CronJob" not in issue.rule  # only what 1.29 lacks
    assert not list(check_kubernetes_apis(ClusterSpec.model_validate(
        edit(base_spec(), "controlPlane.kubernetesVersion", "1.30.4"))))
    off = edit(edit(base_spec(), "controlPlane.kubernetesVersion", "1.29"), "inCluster.enabled", False)
    assert not list(check_kubernetes_apis(ClusterSpec.model_validate(off)))


def test_a_supported_version_older_than_an_api_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Should AKS still support a minor older than an API aksgpu comes to declare, the spec rule fires
    (parse_cluster_spec, not only the check): here a made-up row served from 1.36 against 1.35."""
    import aksgpu.spec.kubernetes_apis as module

    newer = KubernetesApi("example.k8s.io/v1", "Example", (1, 36), None, "test")
    table = {**kubernetes_apis(), ("example.k8s.io/v1", "Example"): newer}
    monkeypatch.setattr(module, "kubernetes_apis", lambda: table)
    with pytest.raises(SpecError) as raised:
        parse_cluster_spec(edit(base_spec(), "controlPlane.kubernetesVersion", "1.35"))
    [issue] = [i for i in raised.value.errors if i.path == "controlPlane.kubernetesVersion"]
    assert "Example (example.k8s.io/v1) from 1.36" in issue.rule and '"1.36"' in issue.fix


def test_the_oldest_supported_aks_version_serves_every_api() -> None:
    oldest = _supported()[0]
    newest_minimum = max(a.since for a in kubernetes_apis().values() if a.since)
    assert oldest >= newest_minimum, (f"AKS still supports {_text(oldest)}, older than an API aksgpu declares "
                                      f"({_text(newest_minimum)}): the spec rule rejects it")


@pytest.mark.slow
def test_a_spec_at_the_oldest_supported_version_plans_and_its_objects_validate() -> None:
    version = _oldest_supported_lts()
    assert minor_of(version) == _supported()[0]
    spec = edit(edit(edit(base_spec(), "controlPlane.kubernetesVersion", version),
                     "controlPlane.supportPlan", "AKSLongTermSupport"), "controlPlane.tier", "Premium")
    objects = kubernetes_manifests(shared_plan(spec))
    assert any(o["kind"] == "ValidatingAdmissionPolicy" for o in objects)
    for obj in objects:
        assert not validate_object(obj, version), f"{obj['kind']} {obj['metadata']['name']} on {version}"
