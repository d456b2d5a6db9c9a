"""aksgpu: AKS GPU clusters from one validated spec.

`aksgpu.components` is the Pulumi component library (AksGpuCluster and the components it
composes, the ClusterSpec in `aksgpu.components.spec`, the data tables); `aksgpu.cli` is the
command line; `aksgpu.program` is the Pulumi program a project's __main__.py runs.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("aksgpu")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
