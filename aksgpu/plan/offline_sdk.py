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
import glob
import hashlib
import importlib.machinery
import importlib.util
import marshal
import os
import stat
import sys
import tempfile
import time
import typing
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
    release: bytes  # the installed SDK's release (its pulumi-plugin.json), part of what the code is valid for

    def get_code(self, fullname: str) -> CodeType:
        source_path = self.get_filename(fullname)
        try:
            status = os.stat(source_path)
        except OSError:
            return super().get_code(fullname)  # type: ignore[return-value]
        # Valid for this Python (magic number, optimization level), this SDK release and this very
        # file (path in the name; size and modification time, which may be before 1970).
        header = b"".join((importlib.util.MAGIC_NUMBER, _FORMAT, self.release,
                           status.st_mtime_ns.to_bytes(12, "little", signed=True),
                           status.st_size.to_bytes(8, "little")))
        digest = hashlib.sha256(source_path.encode("utf-8", "surrogateescape")).hexdigest()[:16]
        cached = self.cache / f"{fullname}-{digest}.{sys.implementation.cache_tag}-o{sys.flags.optimize}.code"
        data = _read_ours(cached)
        if data is not None and data.startswith(header):
            try:
                code = marshal.loads(memoryview(data)[len(header):])
                if isinstance(code, CodeType):
                    return code
            except (EOFError, ValueError, TypeError):
                pass  # cut short or not code: compiled again below
        code = compile(self.get_data(source_path), source_path, "exec", dont_inherit=True,
                       flags=__future__.annotations.compiler_flag)
        _write_whole(cached, header + marshal.dumps(code))
        return code

    def exec_module(self, module: ModuleType) -> None:
        super().exec_module(module)
        _restore_typed_dict_keys(module)


def _restore_typed_dict_keys(module: ModuleType) -> None:
    """A TypedDict tells its required keys from its optional ones by the evaluated annotation
    (`NotRequired[...]`: typing.py _TypedDictMeta, Python 3.11); as text it counts every key as
    required. The SDKs' `...ArgsDict` classes, each a direct TypedDict of its own annotations (no base
    but TypedDict, no `total=False`: pulumi-azure-native 3.29.0, pulumi-kubernetes 4.34.2), get the
    keys they have as shipped back, by that rule read from the text (tests/test_offline_sdk.py
    compares every one); a TypedDict of another shape is left as typing made it."""
    for value in list(vars(module).values()):
        if not (typing.is_typeddict(value) and value.__module__ == module.__name__
                and getattr(value, "__orig_bases__", None) == (typing.TypedDict,)):
            continue
        markers = {key: _marker(annotation) for key, annotation in value.__annotations__.items()}
        optional = {key for key, marker in markers.items()
                    if marker == "NotRequired" or (marker != "Required" and not value.__total__)}
        value.__required_keys__ = frozenset(value.__annotations__.keys() - optional)
        value.__optional_keys__ = frozenset(optional)


def _marker(annotation: object) -> str:
    """`NotRequired` of the annotation text `NotRequired[...]` (or `typing.NotRequired[...]`), as typing
    keeps it (a ForwardRef, or the string)."""
    text = getattr(annotation, "__forward_arg__", annotation)
    return text.partition("[")[0].rpartition(".")[2].strip() if isinstance(text, str) else ""


def _read_ours(path: Path) -> bytes | None:
    """The file's bytes where it is the user's own and nobody else's to write (its code runs here,
    whoever swapped the folder it is in); None otherwise or where it cannot be read."""
    try:
        with open(path, "rb") as stream:
            if not _only_ours(os.fstat(stream.fileno())):
                return None
            return stream.read()
    except OSError:
        return None


# A partial file older than this was left by a writer that was killed (a write takes milliseconds).
_ABANDONED_SECONDS = 3600


def _write_whole(path: Path, data: bytes) -> None:
    """Another process may write the same file at once: each writes a file of its own and renames it
    over. Partial files of the same name that a killed writer left are removed."""
    try:
        handle, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    except OSError:
        return
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.replace(partial, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        return
    for left in path.parent.glob(f".{glob.escape(path.name)}.*.partial"):
        with contextlib.suppress(OSError):
            if left.stat().st_mtime < time.time() - _ABANDONED_SECONDS:
                left.unlink()


class SdkCodeFinder:
    """Finds the provider SDKs' modules as Python would, to load with _TextAnnotationsLoader.

    Why: most of what importing them costs is `typing` building the annotation of every parameter
    and property of their generated classes (`Optional[pulumi.Input['ManagedClusterAgentPoolProfileArgs']]`,
    thousands per package), which nothing reads at import. As text (PEP 563) they cost nothing until
    read, and Pulumi reads the few it needs through typing.get_type_hints in the class's module
    (pulumi/_types.py `_raw_return_hints` and `_types_from_annotations`, pulumi 3.272.0; the generated
    code already quotes many of them), which gives the same types from text as from objects:
    tests/test_offline_sdk.py compares every class's resolved types both ways. What differs is the
    annotations themselves (text, to anyone reading `__annotations__` directly), for the rest of the
    process once a plan installed this. The cache is aksgpu's, beside no source: PYTHONDONTWRITEBYTECODE
    (about Python's own) leaves it on; AKSGPU_SDK_CODE_CACHE=off turns it off.
    """

    def __init__(self, cache: Path, roots: Sequence[str] = SDK_ROOTS) -> None:
        self.cache = cache
        self.prefixes = tuple(f"{root}." for root in roots)
        self._releases: dict[str, bytes] = {}

    def _release(self, root: str) -> bytes:
        """A digest of the SDK's pulumi-plugin.json (its name and version), read once per process: code
        cached for another release is not this one's, whatever its files' sizes and times."""
        if root not in self._releases:
            package = sys.modules.get(root)
            try:
                text = (Path(package.__file__).parent / "pulumi-plugin.json").read_bytes()  # type: ignore[union-attr, arg-type]
            except (AttributeError, TypeError, OSError):
                text = b""
            self._releases[root] = hashlib.sha256(text).digest()[:8]
        return self._releases[root]

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(self.prefixes):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or type(spec.loader) is not importlib.machinery.SourceFileLoader:
            return spec
        loader = _TextAnnotationsLoader(spec.loader.name, spec.loader.path)
        loader.cache = self.cache
        loader.release = self._release(fullname.partition(".")[0])
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
    """Code is run from the cache (the folder, and each file read from it): it must be the user's
    own, and nobody else's to write."""
    if not hasattr(os, "getuid"):
        return True  # not POSIX: the user's profile folder's own permissions hold
    return status.st_uid == os.getuid() and not status.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
