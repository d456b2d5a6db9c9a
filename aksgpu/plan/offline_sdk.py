"""What the offline plan changes in how the Pulumi SDKs run, and why each change leaves the plan
as it was: aliases dropped, no stack traces taken, and the provider SDKs' annotations left as text.

A real `pulumi preview` or `up` runs none of this: the program imports nothing from aksgpu.plan.
Each is held by a test that plans or registers the same with and without it
(tests/test_offline_sdk.py, tests/test_plan_golden.py, tests/test_alias_urns.py).
"""

from __future__ import annotations

import __future__
import contextlib
import functools
import hashlib
import importlib.machinery
import importlib.util
import marshal
import os
import stat
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import CodeType, ModuleType
from typing import Any

# The provider SDKs whose modules load with their annotations as text (see SdkCodeFinder).
SDK_ROOTS = ("pulumi_azure_native", "pulumi_kubernetes")
# AKSGPU_SDK_CODE_CACHE: a folder for the compiled modules, or "off" for the SDKs as shipped.
CACHE_VARIABLE = "AKSGPU_SDK_CODE_CACHE"
_FORMAT = b"aksgpu-sdk-code-1"  # bump when what is compiled, or how, changes


def drop_aliases(args: Any) -> Any:
    """A stack transformation. Aliases map old URNs onto new ones in existing state; an offline
    plan has no state, and turning ~115 of them per azure-native resource into URNs dominated plan time."""
    import copy

    import pulumi

    if not args.opts.aliases:
        return None
    opts = copy.copy(args.opts)
    opts.aliases = None
    return pulumi.ResourceTransformationResult(props=args.props, opts=opts)


@contextlib.contextmanager
def no_stack_traces() -> Iterator[None]:
    """Registrations without the caller's stack. At every registration the SDK walks the Python
    stack and makes a file URI of each frame (`_get_stack_trace` in pulumi/runtime/resource.py,
    pulumi 3.272.0), for the engine to show where a resource was declared. The offline plan's
    monitor never reads it, and it cost about a tenth of a plan. Where the SDK has no such
    function (another version), the plan runs as the SDK is."""
    from pulumi.runtime import resource

    taken = getattr(resource, "_get_stack_trace", None)
    if taken is None:
        yield
        return
    from pulumi.runtime.proto import source_pb2

    resource._get_stack_trace = source_pb2.StackTrace  # an empty trace, as the SDK sends when it finds none
    try:
        yield
    finally:
        resource._get_stack_trace = taken


class _TextAnnotationsLoader(importlib.machinery.SourceFileLoader):
    """The SDK's own source, compiled as if it began with `from __future__ import annotations`,
    and that code kept in aksgpu's cache (Python's bytecode cache holds the code compiled as shipped)."""

    cache: Path

    def get_code(self, fullname: str) -> CodeType:
        source_path = self.get_filename(fullname)
        try:
            status = os.stat(source_path)
        except OSError:
            return super().get_code(fullname)  # type: ignore[return-value]
        # Valid for this Python (its magic number) and this very file: its path, size and mtime.
        header = b"".join((importlib.util.MAGIC_NUMBER, _FORMAT, status.st_mtime_ns.to_bytes(8, "little"),
                           status.st_size.to_bytes(8, "little")))
        digest = hashlib.sha256(source_path.encode("utf-8", "surrogateescape")).hexdigest()[:16]
        cached = self.cache / f"{fullname}-{digest}.{sys.implementation.cache_tag}.code"  # one per Python
        try:
            data = cached.read_bytes()
            if data.startswith(header):
                code = marshal.loads(memoryview(data)[len(header):])
                if isinstance(code, CodeType):
                    return code
        except (OSError, EOFError, ValueError, TypeError):
            pass  # absent, unreadable or cut short: compiled again below
        code = compile(self.get_data(source_path), source_path, "exec", dont_inherit=True,
                       flags=__future__.annotations.compiler_flag)
        _write_whole(cached, header + marshal.dumps(code))
        return code


def _write_whole(path: Path, data: bytes) -> None:
    """Another process may write the same file at once: each writes its own and renames it over."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        partial.write_bytes(data)
        os.replace(partial, path)
    except OSError:
        with contextlib.suppress(OSError):
            partial.unlink()


class SdkCodeFinder:
    """Finds the provider SDKs' modules as Python would, to load with _TextAnnotationsLoader.

    Why: most of what importing them costs is `typing` building the annotation of every parameter
    and property of their generated classes (`Optional[pulumi.Input['ManagedClusterAgentPoolProfileArgs']]`,
    thousands per package), which nothing reads at import. As text (PEP 563) they cost nothing until
    read, and Pulumi reads the few it needs through typing.get_type_hints in the class's module
    (pulumi/_types.py `_raw_return_hints` and `_types_from_annotations`, pulumi 3.272.0; the generated
    code already quotes many of them), which gives the same types from text as from objects:
    tests/test_offline_sdk.py compares every class's resolved types both ways.
    """

    def __init__(self, cache: Path, roots: Sequence[str] = SDK_ROOTS) -> None:
        self.cache = cache
        self.prefixes = tuple(f"{root}." for root in roots)

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(self.prefixes):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or type(spec.loader) is not importlib.machinery.SourceFileLoader:
            return spec
        loader = _TextAnnotationsLoader(spec.loader.name, spec.loader.path)
        loader.cache = self.cache
        spec.loader = loader
        return spec


def cache_folder(environment: dict[str, str] | os._Environ[str] = os.environ) -> Path | None:
    """Where the compiled SDK modules are kept: AKSGPU_SDK_CODE_CACHE, else the user's cache folder
    (XDG_CACHE_HOME or ~/.cache, then aksgpu/sdk-code); None where it is turned off."""
    chosen = environment.get(CACHE_VARIABLE, "")
    if chosen.lower() in ("off", "0", "false", "no"):
        return None
    if chosen:
        return Path(chosen)
    base = environment.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "aksgpu" / "sdk-code"


@functools.cache
def load_sdks_with_text_annotations() -> bool:
    """From now on, this process imports the provider SDKs' modules with their annotations as text,
    compiled once into the cache folder. Without a folder of the user's own to write to (one others
    may write to is refused: its code would run here), it changes nothing (a module compiled anew at
    every start would cost more than the annotations). Whether it is on."""
    folder = cache_folder()
    if folder is None:
        return False
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        status = folder.stat()
    except OSError:
        return False
    if not os.access(folder, os.W_OK | os.X_OK) or not _only_ours(status):
        return False
    sys.meta_path.insert(0, SdkCodeFinder(folder))
    return True


def _only_ours(status: os.stat_result) -> bool:
    """Code is run from this folder: it must be the user's own, and nobody else's to write in."""
    if not hasattr(os, "getuid"):
        return True  # not POSIX: the user's profile folder's own permissions hold
    return status.st_uid == os.getuid() and not status.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
