"""aksgpu: AKS GPU clusters from one validated spec.

`aksgpu.components` is the Pulumi component library (AksGpuCluster and the components it
composes, the ClusterSpec in `aksgpu.components.spec`, the data tables); `aksgpu.cli` is the
command line; `aksgpu.program` is the Pulumi program a project's __main__.py runs.
"""

from __future__ import annotations


def __getattr__(name: str) -> str:
    # __version__ on first use: importlib.metadata costs about 25 ms, which every command would pay.
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("aksgpu")
        except PackageNotFoundError:  # running from a source tree that was never installed
            return "0+unknown"
    raise AttributeError(f"module 'aksgpu' has no attribute {name!r}")
