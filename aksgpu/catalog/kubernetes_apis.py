"""The Kubernetes APIs aksgpu declares objects of (kubernetes_apis.yaml), typed."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from aksgpu.catalog import load

Minor = tuple[int, int]


def minor_of(version: str) -> Minor:
    """(major, minor) of "1.30" or "1.30.4"."""
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


@dataclass(frozen=True)
class KubernetesApi:
    """One apiVersion/kind: served by Kubernetes from `since`, or by a CRD that `provided_by` installs."""

    api_version: str
    kind: str
    since: Minor | None
    """The oldest minor that serves it by default; None for a custom resource."""
    provided_by: str | None
    """For a custom resource: the chart or add-on whose CRD serves it."""
    source: str

    @property
    def name(self) -> str:
        return f"{self.kind} ({self.api_version})"

    @property
    def since_text(self) -> str:
        return f"{self.since[0]}.{self.since[1]}" if self.since else ""


@functools.cache
def kubernetes_apis() -> dict[tuple[str, str], KubernetesApi]:
    """(apiVersion, kind) -> its row."""
    table = load("kubernetes_apis")
    rows: dict[tuple[str, str], KubernetesApi] = {}
    for row in table["apis"]:
        since = row.get("since")
        rows[(row["apiVersion"], row["kind"])] = KubernetesApi(
            api_version=row["apiVersion"], kind=row["kind"], since=minor_of(since) if since else None,
            provided_by=row.get("from"), source=str(row.get("source") or row.get("from")))
    return rows
