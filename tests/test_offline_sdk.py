"""What the offline plan changes in how the SDKs run (aksgpu/plan/offline_sdk.py) leaves the plan as
it was: the provider SDKs' annotations kept as text resolve to the same types, the compiled code's
cache is only ever read for the very file it was compiled from, and no stack trace is taken."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import traceback
from pathlib import Path

import pytest

from aksgpu.plan import offline_sdk
from aksgpu.plan.offline_sdk import SdkCodeFinder, cache_folder, load_sdks_with_text_annotations, no_stack_traces
from tests.helpers import EXAMPLE, REPO

# Every input, output and resource class of the SDK modules a plan imports, and the types Pulumi
# resolves from its annotations to translate and deserialize values (pulumi/_types.py,
# pulumi 3.272.0: input_type_types, output_type_types, resource_types, each typing.get_type_hints).
RESOLVED_TYPES = textwrap.dedent("""
    import inspect, json, sys, typing
    from aksgpu.plan.offline_sdk import load_sdks_with_text_annotations
    text = sys.argv[1] == "text"
    assert load_sdks_with_text_annotations() is text
    import aksgpu.plan.preload
    import pulumi
    from pulumi import _types
    from pulumi_azure_native.containerservice import managed_cluster
    parameters = inspect.signature(managed_cluster.ManagedClusterArgs.__init__).parameters
    annotation = parameters["agent_pool_profiles"].annotation
    assert isinstance(annotation, str) is text, annotation
    resolved = {}
    for name, module in sorted(sys.modules.items()):
        if not name.startswith(("pulumi_azure_native.", "pulumi_kubernetes.")) or module is None:
            continue
        for value in list(vars(module).values()):
            if not isinstance(value, type) or value.__module__ != name:
                continue
            if typing.is_typeddict(value):  # the ...ArgsDict classes: which keys they require
                resolved[f"{name}.{value.__qualname__}"] = {"required": repr(sorted(value.__required_keys__)),
                                                            "optional": repr(sorted(value.__optional_keys__))}
                continue
            if _types.is_input_type(value):
                reads = [_types.input_type_types]
            elif _types.is_output_type(value):
                reads = [_types.output_type_types, _types._raw_return_hints]
            elif issubclass(value, pulumi.CustomResource):
                reads = [_types.resource_types]
            else:
                continue
            found = {}
            for read in reads:
                try:
                    found.update({f"{read.__name__} {key}": repr(typ) for key, typ in read(value).items()})
                except Exception as error:
                    found[f"{read.__name__} (error)"] = type(error).__name__
            resolved[f"{name}.{value.__qualname__}"] = found
    print(json.dumps(resolved, sort_keys=True))
""")


def _resolved(mode: str, cache: Path) -> dict[str, dict[str, str]]:
    environment = {**os.environ, offline_sdk.CACHE_VARIABLE: str(cache) if mode == "text" else "off"}
    result = subprocess.run([sys.executable, "-c", RESOLVED_TYPES, mode], capture_output=True, text=True,
                            cwd=REPO, env=environment, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


@pytest.mark.slow
def test_every_sdk_class_of_a_plan_resolves_the_same_types_from_text_annotations(tmp_path: Path) -> None:
    as_objects = _resolved("objects", tmp_path)
    as_text = _resolved("text", tmp_path)
    assert len(as_objects) > 5000  # every class the plan's SDK modules define, not a few
    assert sum("required" in found for found in as_objects.values()) > 1000  # the TypedDicts among them
    assert not [name for name, found in as_objects.items() if any("(error)" in key for key in found)]
    assert as_text == as_objects


def _fake_sdk(root: Path, body: str) -> None:
    package = root / "fakesdk"
    package.mkdir(exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / "module.py").write_text(body)


@pytest.fixture
def fake_sdk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A package `fakesdk` on sys.path, found by an SdkCodeFinder with a cache in tmp_path/cache."""
    _fake_sdk(tmp_path, "def f(x: NotDefinedAnywhere) -> int:\n    return 1\nVALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    finder = SdkCodeFinder(tmp_path / "cache", roots=("fakesdk",))
    (tmp_path / "cache").mkdir()
    monkeypatch.setattr(sys, "meta_path", [finder, *sys.meta_path])
    yield tmp_path
    for name in ("fakesdk", "fakesdk.module"):
        sys.modules.pop(name, None)


def _import_module() -> object:
    sys.modules.pop("fakesdk.module", None)
    import importlib

    importlib.invalidate_caches()
    return importlib.import_module("fakesdk.module")


def test_a_found_module_keeps_its_annotations_as_text(fake_sdk: Path) -> None:
    module = _import_module()  # as shipped, the annotation would raise NameError at import
    assert module.f.__annotations__ == {"x": "NotDefinedAnywhere", "return": "int"}  # type: ignore[attr-defined]
    assert len(list((fake_sdk / "cache").glob("fakesdk.module-*.code"))) == 1


def test_the_second_import_reads_the_cache_without_compiling(fake_sdk: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _import_module()

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("compiled again")

    monkeypatch.setattr(offline_sdk, "compile", refuse, raising=False)
    assert _import_module().VALUE == 1  # type: ignore[attr-defined]


def test_a_changed_source_is_compiled_again(fake_sdk: Path) -> None:
    _import_module()
    _fake_sdk(fake_sdk, "VALUE = 22\n")  # another size (and mtime): the cached code is not this file's
    assert _import_module().VALUE == 22  # type: ignore[attr-defined]


def test_a_cached_file_cut_short_is_compiled_again_and_rewritten(fake_sdk: Path) -> None:
    _import_module()
    (cached,) = (fake_sdk / "cache").glob("fakesdk.module-*.code")
    whole = cached.read_bytes()
    cached.write_bytes(whole[: len(whole) // 2])
    assert _import_module().VALUE == 1  # type: ignore[attr-defined]
    assert cached.read_bytes() == whole
    assert not list((fake_sdk / "cache").glob(".*partial"))


def test_a_write_removes_what_a_killed_writer_left_but_not_a_write_under_way(fake_sdk: Path) -> None:
    _import_module()
    (cached,) = (fake_sdk / "cache").glob("fakesdk.module-*.code")
    abandoned = cached.with_name(f".{cached.name}.dead1.partial")
    under_way = cached.with_name(f".{cached.name}.live1.partial")
    for left in (abandoned, under_way):
        left.write_bytes(b"half")
    os.utime(abandoned, (1, 1))
    cached.unlink()
    _import_module()  # compiles and writes again
    assert cached.exists() and not abandoned.exists() and under_way.exists()


def test_a_cached_file_others_may_write_is_not_run(fake_sdk: Path) -> None:
    _import_module()
    (cached,) = (fake_sdk / "cache").glob("fakesdk.module-*.code")
    planted = cached.read_bytes().replace(b"VALUE", b"EVILS")  # another name of the same length
    cached.write_bytes(planted)
    cached.chmod(0o666)
    module = _import_module()
    assert module.VALUE == 1 and not hasattr(module, "EVILS")  # type: ignore[attr-defined]
    assert cached.stat().st_mode & 0o022 == 0  # compiled again and replaced by a file of the user's own


def test_another_release_of_the_sdk_is_compiled_again(fake_sdk: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = fake_sdk / "fakesdk" / "module.py"
    _import_module()
    written = source.stat().st_mtime_ns
    source.write_text(source.read_text().replace("VALUE = 1", "VALUE = 2"))  # the same size
    os.utime(source, ns=(written, written))  # and time, as a reinstall with normalized timestamps leaves it
    assert _import_module().VALUE == 1  # type: ignore[attr-defined]  # size and time cannot tell (nor can Python's)
    (fake_sdk / "fakesdk" / "pulumi-plugin.json").write_text('{"name": "fakesdk", "version": "2.0.0"}')
    monkeypatch.setattr(sys, "meta_path", [SdkCodeFinder(fake_sdk / "cache", roots=("fakesdk",)), *sys.meta_path[1:]])
    assert _import_module().VALUE == 2  # type: ignore[attr-defined]  # the release does


def test_a_source_dated_before_1970_loads(fake_sdk: Path) -> None:
    os.utime(fake_sdk / "fakesdk" / "module.py", ns=(-10**17, -10**17))
    assert _import_module().VALUE == 1  # type: ignore[attr-defined]
    assert _import_module().VALUE == 1  # type: ignore[attr-defined]  # and from the cache


def test_code_is_cached_per_optimization_level(tmp_path: Path) -> None:
    _fake_sdk(tmp_path, "DEBUG = __debug__\n")
    (tmp_path / "cache").mkdir()
    script = ("import sys; sys.path.insert(0, sys.argv[1]); from pathlib import Path; "
              "from aksgpu.plan.offline_sdk import SdkCodeFinder; "
              "sys.meta_path.insert(0, SdkCodeFinder(Path(sys.argv[1]) / 'cache', roots=('fakesdk',))); "
              "import fakesdk.module; print(fakesdk.module.DEBUG)")
    outputs = [subprocess.run([sys.executable, *flags, "-c", script, str(tmp_path)], capture_output=True, text=True,
                              cwd=REPO, check=True).stdout.strip() for flags in ([], ["-O"], [])]
    assert outputs == ["True", "False", "True"]


def test_typed_dicts_keep_their_required_and_optional_keys(fake_sdk: Path) -> None:
    _fake_sdk(fake_sdk, textwrap.dedent("""
        from typing import NotRequired, TypedDict
        class ThingArgsDict(TypedDict):
            name: str
            size: NotRequired[int]
        class LooseArgsDict(TypedDict, total=False):
            tag: str
    """))
    module = _import_module()
    assert module.ThingArgsDict.__required_keys__ == {"name"}  # type: ignore[attr-defined]
    assert module.ThingArgsDict.__optional_keys__ == {"size"}  # type: ignore[attr-defined]
    assert module.LooseArgsDict.__optional_keys__ == {"tag"}  # type: ignore[attr-defined]


def test_modules_outside_the_sdks_load_as_python_loads_them(tmp_path: Path) -> None:
    finder = SdkCodeFinder(tmp_path, roots=("fakesdk",))
    assert finder.find_spec("json") is None
    assert finder.find_spec("fakesdkx.module") is None


def test_the_cache_folder_is_chosen_or_turned_off_by_the_environment(tmp_path: Path) -> None:
    assert cache_folder({"AKSGPU_SDK_CODE_CACHE": "off"}) is None
    assert cache_folder({"AKSGPU_SDK_CODE_CACHE": str(tmp_path)}) == tmp_path
    assert cache_folder({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "aksgpu" / "sdk-code"


def test_a_cache_folder_of_the_users_own_is_taken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AKSGPU_SDK_CODE_CACHE", str(tmp_path / "new" / "cache"))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    assert load_sdks_with_text_annotations.__wrapped__() is True
    assert isinstance(sys.meta_path[0], SdkCodeFinder)
    assert (tmp_path / "new" / "cache").stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize("setting", ["off", "a file", "others may write"])
def test_without_a_cache_folder_of_the_users_own_to_write_the_sdks_load_as_shipped(
        tmp_path: Path, setting: str, monkeypatch: pytest.MonkeyPatch) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    chosen = {"off": "off", "a file": str(blocked / "cache"), "others may write": str(shared)}[setting]
    monkeypatch.setenv("AKSGPU_SDK_CODE_CACHE", chosen)
    before = list(sys.meta_path)
    assert load_sdks_with_text_annotations.__wrapped__() is False
    assert sys.meta_path == before


def test_an_offline_plan_takes_no_stack_trace_and_gives_the_sdks_function_back(monkeypatch: pytest.MonkeyPatch) -> None:
    from pulumi.runtime import resource

    from aksgpu.plan.planner import plan_stack
    from aksgpu.project.stackfile import resolve_stack

    taken: list[object] = []
    original_extract = traceback.extract_stack
    monkeypatch.setattr(traceback, "extract_stack", lambda *a, **k: taken.append(1) or original_extract(*a, **k))
    before = resource._get_stack_trace
    plan = plan_stack(resolve_stack("dev", EXAMPLE))
    assert len(plan.resources) > 40
    assert taken == []
    assert resource._get_stack_trace is before
    assert before.__module__ == "pulumi.runtime.resource"  # the SDK's own


def test_no_stack_traces_leaves_an_sdk_without_the_function_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    from pulumi.runtime import resource

    monkeypatch.delattr(resource, "_get_stack_trace")
    with no_stack_traces():
        assert not hasattr(resource, "_get_stack_trace")
