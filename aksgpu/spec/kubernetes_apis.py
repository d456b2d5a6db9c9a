"""The Kubernetes APIs a spec makes aksgpu declare objects of, held to controlPlane.kubernetesVersion.

An object of an API the cluster's version does not serve fails at `pulumi up` ("no matches for
kind"), after the Azure resources are made: e.g. a 1.29 cluster with aksgpu's admission policies
(admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy, served from 1.30). The minima are the
catalog's (kubernetes_apis.yaml, from the Kubernetes docs); tests/test_kubernetes_apis.py holds
every object the planner declares to `declared_apis`, so this derivation cannot fall behind.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from aksgpu.catalog.kubernetes_apis import KubernetesApi, kubernetes_apis, minor_of
from aksgpu.spec.base import Issue

if TYPE_CHECKING:
    from aksgpu.spec import ClusterSpec

VERSION_FIELD = "controlPlane.kubernetesVersion"


def declared_apis(spec: ClusterSpec) -> dict[tuple[str, str], str]:
    """(apiVersion, kind) -> the field that makes aksgpu declare objects of it, for every built-in
    API (served by Kubernetes itself, not a chart's CRD) the in-cluster layer may declare for this
    spec. Every such API is declared by the in-cluster layer, so all of them while it is on (a
    superset: e.g. the admission policies of the GPU gate and the teams' pod security), none off."""
    if not spec.in_cluster.enabled:
        return {}
    return {key: "inCluster.enabled" for key, api in kubernetes_apis().items() if api.since is not None}


def missing_apis(spec: ClusterSpec) -> list[tuple[KubernetesApi, str]]:
    """The APIs `declared_apis` names that the spec's Kubernetes version does not serve yet, with the
    field that brings each; empty when the version is left to AKS (its default is a supported one)."""
    version = spec.control_plane.kubernetes_version
    if version is None:
        return []
    asked = minor_of(version)
    apis = kubernetes_apis()
    found = [(apis[key], field) for key, field in declared_apis(spec).items()]
    return sorted(((api, field) for api, field in found if api.since is not None and api.since > asked),
                  key=lambda item: (item[0].since or (0, 0), item[0].api_version, item[0].kind))


def check_kubernetes_apis(spec: ClusterSpec) -> Iterator[Issue]:
    """One error naming every API the version lacks, the version they need, and the fix."""
    missing = missing_apis(spec)
    if not missing:
        return
    needed = max((api.since for api, _ in missing if api.since), default=(0, 0))
    fields = sorted({field for _, field in missing})
    names = ", ".join(f"{api.name} from {api.since_text}" for api, _ in missing)
    yield Issue(VERSION_FIELD, spec.control_plane.kubernetes_version,
                f"Kubernetes {spec.control_plane.kubernetes_version} does not serve APIs aksgpu declares objects of "
                f"with {' and '.join(fields)}: {names} (catalog kubernetes_apis.yaml)",
                f'use Kubernetes "{needed[0]}.{needed[1]}" or later, or set {fields[0]}: false to declare no '
                "in-cluster objects")
