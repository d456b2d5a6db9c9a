"""The provider SDKs' packages, loaded one module per class used.

pulumi_azure_native and pulumi_kubernetes load their subpackages lazily (a `_LazyModule` per
package, `_utilities.lazy_import`), but each subpackage's `__init__` then imports every module it
has: `network` about 290 for the five types aksgpu declares (about 1.1 s of a plan), `core.v1`
53. `load_by_class()` turns the subpackages nobody has touched yet into partial packages: a
name read from one imports the module that defines it (`VirtualNetwork` -> virtual_network.py,
`ConfigMap` -> ConfigMap.py, input types from `_inputs`, enums from `_enums`), nothing else. A
name found nowhere there runs the package's own `__init__` after all (every module, as without
this), so a program sees the same classes either way, only fewer of them loaded.

The SDKs' generated layout this relies on (pulumi-azure-native v3, pulumi-kubernetes v4, checked
2026-11-27 against the installed packages): each class module exports its class in `__all__`
and its file is the class name in snake case (azure-native) or as is (kubernetes); see
pulumi/pulumi pkg/codegen/python/gen.go (one module per resource, `from .<module> import *` in
the package's `__init__`).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import re
import sys
import types
from pathlib import Path
from typing import Any

ROOTS = ("pulumi_azure_native", "pulumi_kubernetes")
_WORD = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_SHARED = ("_enums", "_inputs")


class _PartialPackage(types.ModuleType):
    """A generated SDK package whose `__init__` has not run: names load module by module."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        folder = Path(self.__dict__["__path__"][0])
        if (folder / name / "__init__.py").is_file():  # a subpackage (pulumi_kubernetes.core -> v1)
            return _subpackage(self, name)
        for module_name in _candidates(name):
            if (folder / f"{module_name}.py").is_file():
                module = importlib.import_module(f"{self.__name__}.{module_name}")
                # As `from .<module> import *` binds it: a kubernetes kind's class (ConfigMap.py
                # defines ConfigMap), an invoke's function, over the module of the same name.
                if name in getattr(module, "__all__", ()):
                    value = getattr(module, name)
                    setattr(self, name, value)
                    return value
                if module_name == name:  # a module read as such: outputs
                    return module
        _load_everything(self)
        return getattr(self, name)


def _candidates(name: str) -> list[str]:
    """Modules that may define `name`: its own (snake case), then the package's shared ones."""
    base = name.removesuffix("InitArgs").removesuffix("_output")
    snake = _WORD.sub("_", base).lower()
    return list(dict.fromkeys([name, base, snake, *_SHARED]))


def _subpackage(package: types.ModuleType, name: str) -> types.ModuleType:
    fullname = f"{package.__name__}.{name}"
    module = sys.modules.get(fullname)
    if module is None:
        spec = importlib.machinery.PathFinder.find_spec(fullname, package.__dict__["__path__"])
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        module.__class__ = _PartialPackage
        sys.modules[fullname] = module
    else:
        _make_partial(module)
    setattr(package, name, module)
    return module


def _load_everything(package: types.ModuleType) -> None:
    """Run the package's own `__init__` in it: every module, as an eager import would."""
    package.__class__ = types.ModuleType
    spec = package.__dict__["__spec__"]
    code = spec.loader.get_code(spec.name)
    exec(code, package.__dict__)  # the installed package's own __init__


def _make_partial(module: types.ModuleType) -> None:
    """A `_LazyModule` not loaded yet becomes a partial package, in place (whoever holds it keeps it)."""
    if type(module).__name__ != "_LazyModule":
        return
    namespace = object.__getattribute__(module, "__dict__")
    spec = namespace["__spec__"]
    loader = getattr(spec.loader, "loader", spec.loader)  # the LazyLoader wraps the package's own loader
    if namespace.get("__path__") is None:
        return  # a plain module, not a package: the lazy load stays
    spec.loader = loader
    spec.loader_state = None
    namespace["__loader__"] = loader
    module.__class__ = _PartialPackage


def load_by_class() -> None:
    """Make the SDKs' untouched subpackages partial (see the module's docstring); idempotent."""
    for root in ROOTS:
        package = importlib.import_module(root)
        for value in list(vars(package).values()):
            if isinstance(value, types.ModuleType):
                _make_partial(value)


def fully_loaded(name: str) -> bool:
    """Whether the SDK package `name` ran its own `__init__` (tests: the plan should not need it)."""
    module = sys.modules.get(name)
    return module is not None and type(module).__name__ not in ("_PartialPackage", "_LazyModule")
