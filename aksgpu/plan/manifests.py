"""`aksgpu plan ENV --manifests DIR`: the plan's Kubernetes objects as plain YAML files.

Every Kubernetes object the program declares is written as the manifest the API server would
receive (one file per object, `<namespace or _cluster>/<kind>-<name>.yaml`), and every Helm
release as its chart, version, repository, namespace and values (`helm/<release>.yaml`), so users
and their own tools (kubectl --dry-run, kubeconform, policy engines) can inspect them. DIR is
aksgpu's: it must be empty, absent, or written by an earlier `--manifests` run (it holds
MARKER_FILE, which lists each file it wrote with its digest), whose files are replaced; a folder
with anything else in it, or with a file changed since, is refused, so nothing a user wrote is lost.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml

from aksgpu.errors import Problem, UserError
from aksgpu.plan.planner import Plan, PlannedResource

MARKER_FILE = ".aksgpu-manifests"
HELM_RELEASE_TYPE = "kubernetes:helm.sh/v3:Release"
_NOT_OBJECTS = (HELM_RELEASE_TYPE, "pulumi:providers:kubernetes")


def kubernetes_objects(plan: Plan) -> list[PlannedResource]:
    """The planned resources that are Kubernetes objects (not Helm releases or providers)."""
    return [r for r in plan.resources if r.custom and r.type.startswith("kubernetes:") and r.type not in _NOT_OBJECTS]


def manifest(resource: PlannedResource) -> dict[str, Any]:
    """The object as the API server receives it: apiVersion and kind first, then the rest."""
    inputs = dict(resource.inputs)
    head: dict[str, Any] = {key: inputs.pop(key) for key in ("apiVersion", "kind", "metadata") if key in inputs}
    return {**head, **inputs}


def helm_release(resource: PlannedResource) -> dict[str, Any]:
    inputs = resource.inputs
    return {
        "release": inputs.get("name", resource.name),
        "chart": inputs.get("chart"),
        "version": inputs.get("version"),
        "repository": (inputs.get("repositoryOpts") or {}).get("repo"),
        "namespace": inputs.get("namespace"),
        "values": inputs.get("values") or {},
    }


def _file_name(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-._" else "-" for c in text)


def manifest_files(plan: Plan) -> dict[str, str]:
    """Relative path -> YAML text, for every Kubernetes object and Helm release of the plan."""
    files: dict[str, str] = {}
    for resource in kubernetes_objects(plan):
        document = manifest(resource)
        meta = document.get("metadata") or {}
        folder = _file_name(str(meta.get("namespace") or "_cluster"))
        name = (f"{_file_name(str(document.get('kind', 'Object')).lower())}-"
                f"{_file_name(str(meta.get('name', resource.name)))}")
        files[f"{folder}/{name}.yaml"] = yaml.safe_dump(document, sort_keys=False, default_flow_style=False)
    for resource in plan.by_type(HELM_RELEASE_TYPE):
        release = helm_release(resource)
        files[f"helm/{_file_name(str(release['release']))}.yaml"] = yaml.safe_dump(
            release, sort_keys=False, default_flow_style=False)
    return dict(sorted(files.items()))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _check_replaceable(directory: Path) -> None:
    """Refuse a non-empty folder unless an earlier run wrote every file in it, unchanged since."""
    marker = directory / MARKER_FILE
    if not marker.is_file():
        raise UserError(problems=[Problem("--manifests", str(directory), "a folder that is not empty and that an "
                                          "earlier --manifests run did not write: its files would be lost",
                                          "name an empty or new folder")])
    written = {}
    for line in marker.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            digest, _, relative = line.partition("  ")
            written[relative] = digest
    present = sorted(str(path.relative_to(directory)) for path in directory.rglob("*")
                     if not path.is_dir() and path != marker)
    foreign = [relative for relative in present if relative not in written]
    changed = [relative for relative in present if relative in written
               and _digest((directory / relative).read_text(encoding="utf-8", errors="replace")) != written[relative]]
    if foreign or changed:
        listed = ", ".join((foreign + changed)[:5]) + (" ..." if len(foreign + changed) > 5 else "")
        raise UserError(problems=[Problem("--manifests", str(directory), f"the folder holds files an earlier "
                                          f"--manifests run did not write, or changed since ({listed}); replacing "
                                          "the folder would lose them", "move them out, or name another folder")])


def write_manifests(plan: Plan, directory: Path) -> list[Path]:
    """Write the plan's manifests into `directory` (see the module docstring); returns the files."""
    files = manifest_files(plan)
    staging: Path | None = None
    try:
        if directory.exists() and not directory.is_dir():
            raise UserError(problems=[Problem("--manifests", str(directory), "a file: --manifests needs a folder",
                                              "name a new folder")])
        if directory.is_dir() and any(directory.iterdir()):
            _check_replaceable(directory)
        directory.parent.mkdir(parents=True, exist_ok=True)
        # Written beside the target and swapped in whole: an interrupted run leaves the old folder.
        staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
        for relative, text in files.items():
            path = staging / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        listing = "".join(f"{_digest(text)}  {relative}\n" for relative, text in files.items())
        (staging / MARKER_FILE).write_text(
            f"# Written by `aksgpu plan --manifests` for stack {plan.stack}; the next run replaces this folder\n"
            f"# as long as it holds only these files, unchanged (sha256, path):\n{listing}", encoding="utf-8")
        if directory.exists():
            retired = directory.with_name(f".{directory.name}.old")
            shutil.rmtree(retired, ignore_errors=True)
            os.replace(directory, retired)
            os.replace(staging, directory)
            shutil.rmtree(retired, ignore_errors=True)
        else:
            os.replace(staging, directory)
    except OSError as error:
        raise UserError(f"cannot write the manifests to {directory}: {error.strerror}. Fix: check the folder's "
                        "permissions and free space.") from None
    finally:
        if staging is not None and staging.exists():  # not swapped in: failed or interrupted
            shutil.rmtree(staging, ignore_errors=True)
    return [directory / relative for relative in files]
