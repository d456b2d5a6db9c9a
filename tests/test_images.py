"""The digest table of aksgpu's own images (aksgpu/catalog/images.yaml) and where it is used."""

from __future__ import annotations

import re

import pytest
import yaml

from aksgpu import catalog
from aksgpu.catalog.images import pinned_images_of
from aksgpu.plan.manifests import kubernetes_objects, manifest
from tests.helpers import preset_spec, shared_plan

IMAGE_FIELD = re.compile(r"'image': '([^']+)'")


def test_each_tag_is_the_version_pinned_elsewhere() -> None:
    pins = catalog.pinned_images()
    in_cluster = catalog.load("in_cluster")
    for component in ("python", "pause", "devicePlugin", "dcgmExporter", "dcgm"):
        assert pins[component].image == in_cluster[component]["image"]
        assert pins[component].tag == str(in_cluster[component]["version"])
    acceptance = catalog.load("fabric_acceptance")["image"]
    assert (pins["ngcPytorch"].image, pins["ngcPytorch"].tag) == (acceptance["repository"], acceptance["tag"])


def test_a_digest_needs_its_source_and_no_digest_a_reason() -> None:
    with pytest.raises(ValueError, match="no digest and no reason"):
        pinned_images_of({"images": {"x": {"image": "r/x", "tag": "1", "digest": None}}})
    with pytest.raises(ValueError, match="needs its source"):
        pinned_images_of({"images": {"x": {"image": "r/x", "tag": "1", "digest": "sha256:" + "a" * 64}}})
    with pytest.raises(ValueError, match="is not sha256"):
        pinned_images_of({"images": {"x": {"image": "r/x", "tag": "1", "digest": "sha256:abc", "source": "s"}}})


def test_the_digest_applies_to_its_own_tag_only() -> None:
    pin = catalog.pinned_images()["pause"]
    assert pin.reference() == f"registry.k8s.io/pause:3.10@{pin.digest}"
    assert pin.reference("3.9") == "registry.k8s.io/pause:3.9"


@pytest.mark.parametrize("preset", ["dev", "training"])
def test_every_image_of_a_plan_is_pinned_or_listed_with_a_reason(preset: str) -> None:
    pins = catalog.pinned_images().values()
    pinned = {pin.reference() for pin in pins if pin.digest}
    listed = {pin.reference() for pin in pins if not pin.digest}
    plan = shared_plan(preset_spec(preset))
    images = {m for resource in kubernetes_objects(plan) for m in IMAGE_FIELD.findall(repr(manifest(resource)))}
    unaccounted = {i for i in images if "/" in i and i not in pinned | listed}
    assert images and not unaccounted, unaccounted
    assert images & pinned


@pytest.mark.parametrize("preset", ["dev", "training"])
def test_every_pod_runs_under_the_runtime_default_seccomp_profile(preset: str) -> None:
    plan = shared_plan(preset_spec(preset))
    pods = []
    for resource in kubernetes_objects(plan):
        body = manifest(resource)
        spec = body.get("spec") or {}
        template = (spec.get("jobTemplate", {}).get("spec", spec)).get("template")
        if body.get("kind") in ("DaemonSet", "Deployment", "CronJob", "Job") and template:
            pods.append((body["metadata"]["name"], template["spec"]))
    assert pods
    for name, pod in pods:
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name


def test_the_exporter_has_a_liveness_probe_on_health() -> None:
    plan = shared_plan(preset_spec("dev"))
    exporters = [manifest(r) for r in kubernetes_objects(plan) if manifest(r)["metadata"]["name"] == "dcgm-exporter"]
    assert exporters
    container = exporters[0]["spec"]["template"]["spec"]["containers"][0]
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"
    assert container["livenessProbe"]["httpGet"]["port"] == catalog.load("in_cluster")["dcgmExporter"]["port"]


def test_the_refresh_tool_parses_a_registry_challenge_and_rewrites_one_digest() -> None:
    from tools.refresh_image_digests import TABLE, parse_challenge, rewrite

    # The shape of a registry's 401 answer (Docker's token authentication spec).
    challenge = parse_challenge('Bearer realm="https://nvcr.io/proxy_auth",'
                                'scope="repository:nvidia/k8s/dcgm-exporter:pull"')
    assert challenge == {"realm": "https://nvcr.io/proxy_auth", "scope": "repository:nvidia/k8s/dcgm-exporter:pull"}
    new = "sha256:" + "b" * 64
    text = rewrite(TABLE.read_text(encoding="utf-8"), "dcgm", new)
    text = text.replace("digest: " + new, "digest: " + new + "\n    source: test")
    table = pinned_images_of(yaml.safe_load(text))
    assert table["dcgm"].digest == new
    # One image's digest only: the exporter's and the PyTorch image's are as the table has them.
    before = pinned_images_of(yaml.safe_load(TABLE.read_text(encoding="utf-8")))
    assert table["dcgmExporter"].digest == before["dcgmExporter"].digest
    assert table["ngcPytorch"].digest == before["ngcPytorch"].digest is None
