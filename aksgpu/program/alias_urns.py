"""Alias URNs computed only if something reads them.

Every azure-native resource carries about 115 aliases (one per older API version of its type).
The Python SDK turns each into an alias URN when the resource is constructed (pulumi/resource.py,
Resource.__init__: `self._aliases.append(collapse_alias_to_urn(...))`), a few Outputs apiece:
for a 100-pool program, seconds and hundreds of MB of Python before the engine does anything
(tests/benchmark_real_program.py). Engines with alias specs (every Pulumi CLI since 3.50) are sent
the aliases themselves (pulumi/runtime/resource.py, prepare_aliases) and nothing reads those URNs;
only the older path without alias specs does, when all_aliases iterates a parent's `_aliases`.

`defer_alias_urns()` makes Resource.__init__ keep the arguments of each such call instead, and
makes the call, with the same function and arguments, the first time anything other than
Resource.__init__ reads the resource's `_aliases`; so an engine receives the same registrations
whichever path it takes (tests/test_alias_urns.py records both). Only aliases whose URN cannot
fail to compute are deferred (an `Alias` giving at most a name and a type, as the provider SDKs
generate): any other is computed at construction as before, so an error in it still fails the
program. It acts only on the Pulumi SDK versions it was checked against (TESTED_PULUMI_VERSIONS),
leaves any other as it is, and is turned off by AKSGPU_EAGER_ALIAS_URNS=1. It acts under the mock
runtime too: mocks take the same registration path, and the tests rely on it.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, NamedTuple

# Pulumi Python SDK release -> the day its Resource.__init__, all_aliases, prepare_aliases and
# collapse_alias_to_urn were read and the deferral tested with it (tests/test_alias_urns.py).
TESTED_PULUMI_VERSIONS: dict[str, str] = {"3.272.0": "2026-11-24"}
OPT_OUT_VARIABLE = "AKSGPU_EAGER_ALIAS_URNS"

_log = logging.getLogger(__name__)
_installed = False


class _DeferredAliasUrn(NamedTuple):
    """The arguments of one collapse_alias_to_urn call from Resource.__init__, not made yet."""

    alias: Any
    name: str
    type_: str
    parent: Any


def _cannot_fail(alias: Any, alias_class: type[Any]) -> bool:
    """Whether collapse_alias_to_urn of `alias` always yields a URN: an Alias that sets at most a
    name and a type, as strings (its worker raises only on a None name or type)."""
    return (type(alias) is alias_class
            and all(isinstance(field, str) or field is ... for field in (alias.name, alias.type_))
            and alias.parent is ... and alias.stack is ... and alias.project is ...)


def defer_alias_urns() -> bool:
    """Defer the alias URNs of every resource constructed from now on in this process; True when
    that is (now or already) in effect.

    Safe to call more than once. Does nothing when AKSGPU_EAGER_ALIAS_URNS is 1, when the installed
    Pulumi SDK is not one of TESTED_PULUMI_VERSIONS, or when its code is not shaped as tested.
    """
    global _installed
    if os.environ.get(OPT_OUT_VARIABLE) == "1":
        return False
    if _installed:
        return True
    import pulumi._version
    import pulumi.resource
    import pulumi.runtime.resource

    version = getattr(pulumi._version, "_VERSION", None)
    if version not in TESTED_PULUMI_VERSIONS:
        _log.debug("alias URNs computed eagerly: pulumi %s is not one of %s", version, sorted(TESTED_PULUMI_VERSIONS))
        return False
    resource_class = pulumi.resource.Resource
    resource_init = resource_class.__init__.__code__
    collapse = pulumi.runtime.resource.collapse_alias_to_urn
    # As tested: Resource.__init__ calls its module's collapse_alias_to_urn (the runtime's, found
    # by name at call time) and `_aliases` is a plain instance attribute. Otherwise, hands off.
    if (not hasattr(sys, "_getframe") or "_aliases" in resource_class.__dict__
            or getattr(pulumi.resource, "collapse_alias_to_urn", None) is not collapse
            or "collapse_alias_to_urn" not in resource_init.co_names):
        _log.debug("alias URNs computed eagerly: the Pulumi SDK is not shaped as tested")
        return False
    alias_class = pulumi.resource.Alias

    def collapse_alias_to_urn(alias: Any, name: str, type_: str, parent: Any) -> Any:
        # Deferred only for Resource.__init__: any other caller gets the URN Output it asks for.
        if sys._getframe(1).f_code is resource_init and _cannot_fail(alias, alias_class):
            return _DeferredAliasUrn(alias, name, type_, parent)
        return collapse(alias, name, type_, parent)

    def read_aliases(resource: Any) -> list[Any]:
        try:
            aliases = resource.__dict__["_aliases"]
        except KeyError:
            raise AttributeError("_aliases") from None
        # Resource.__init__ only appends; any other reader (all_aliases, for a child of this
        # resource on an engine without alias specs) gets the URNs, computed once, in place.
        if sys._getframe(1).f_code is not resource_init:
            for index, entry in enumerate(aliases):
                if type(entry) is _DeferredAliasUrn:
                    aliases[index] = collapse(entry.alias, entry.name, entry.type_, entry.parent)
        return aliases

    def write_aliases(resource: Any, aliases: list[Any]) -> None:
        resource.__dict__["_aliases"] = aliases

    pulumi.resource.collapse_alias_to_urn = collapse_alias_to_urn  # type: ignore[assignment]  # the SDK function this replaces
    resource_class._aliases = property(read_aliases, write_aliases)  # type: ignore[assignment]
    _installed = True
    return True
