"""Alias URNs computed only if the engine asks for them.

Every azure-native resource carries about 115 aliases (one per older API version of its type).
The Python SDK turns each into an alias URN when the resource is constructed (Resource.__init__:
`self._aliases.append(collapse_alias_to_urn(...))`), two Output applies apiece: for a 100-pool
program, about 3 s and 220 MB of Python here before the engine does anything
(tests/benchmark_real_program.py). Engines that support alias specs are sent the aliases
themselves (pulumi/runtime/resource.py, prepare_aliases); those URNs are read only on the older
path without alias specs, where all_aliases iterates a parent's `_aliases`.

`defer_alias_urns()` makes `Resource._aliases` hold the calls instead and make each one, with the
same function and arguments, when the list is first iterated or indexed, so what an engine
receives is unchanged whichever path it takes (tests/test_alias_urns.py records both). It acts
only on the Pulumi SDK versions it was checked against (TESTED_PULUMI_VERSIONS) and leaves any
other as it is; AKSGPU_EAGER_ALIAS_URNS=1 turns it off.
"""

from __future__ import annotations

import os
from typing import Any

# The Pulumi Python SDK releases whose Resource.__init__, all_aliases and prepare_aliases were read
# and tested with this change (tests/test_alias_urns.py), checked 2026-11-24.
TESTED_PULUMI_VERSIONS = frozenset({"3.272.0"})
OPT_OUT_VARIABLE = "AKSGPU_EAGER_ALIAS_URNS"


class _DeferredAliasUrn:
    """The arguments of one collapse_alias_to_urn call, made when the URN is first needed."""

    __slots__ = ("alias", "name", "type_", "parent")

    def __init__(self, alias: Any, name: str, type_: str, parent: Any) -> None:
        self.alias, self.name, self.type_, self.parent = alias, name, type_, parent


def _installed_state() -> dict[str, Any]:
    import pulumi.resource

    return pulumi.resource.__dict__.setdefault("_aksgpu_deferred_alias_urns", {})


def defer_alias_urns() -> bool:
    """Defer alias URNs in this process; True when it is (now or already) in effect.

    Safe to call more than once. Does nothing when the installed Pulumi SDK is not one of
    TESTED_PULUMI_VERSIONS, when the SDK's shape is not the one tested, or when
    AKSGPU_EAGER_ALIAS_URNS is set to 1.
    """
    if os.environ.get(OPT_OUT_VARIABLE) == "1":
        return False
    import pulumi._version
    import pulumi.resource

    state = _installed_state()
    if state.get("installed"):
        return True
    if getattr(pulumi._version, "_VERSION", None) not in TESTED_PULUMI_VERSIONS:
        return False
    resource_class = pulumi.resource.Resource
    collapse = getattr(pulumi.resource, "collapse_alias_to_urn", None)
    if collapse is None or isinstance(resource_class.__dict__.get("_aliases"), property):
        return False

    def deferred(alias: Any, name: str, type_: str, parent: Any) -> _DeferredAliasUrn:
        return _DeferredAliasUrn(alias, name, type_, parent)

    class AliasUrns(list):  # type: ignore[type-arg]
        """A resource's alias URNs: appended as deferred calls, computed when first iterated or
        indexed (all_aliases iterates a parent's; Resource.__init__ only appends)."""

        def _computed(self) -> None:
            for index in range(len(self)):
                entry = list.__getitem__(self, index)
                if isinstance(entry, _DeferredAliasUrn):
                    list.__setitem__(self, index, collapse(entry.alias, entry.name, entry.type_, entry.parent))

        def __iter__(self) -> Any:
            self._computed()
            return list.__iter__(self)

        def __getitem__(self, index: Any) -> Any:
            self._computed()
            return list.__getitem__(self, index)

    def get_aliases(resource: Any) -> list[Any]:
        try:
            return resource.__dict__["_aliases"]
        except KeyError:
            raise AttributeError("_aliases") from None

    def set_aliases(resource: Any, value: list[Any]) -> None:
        resource.__dict__["_aliases"] = AliasUrns(value)

    # Resource.__init__ finds collapse_alias_to_urn in its module's globals at call time.
    pulumi.resource.collapse_alias_to_urn = deferred
    resource_class._aliases = property(get_aliases, set_aliases)  # type: ignore[assignment]
    state.update(installed=True, collapse=collapse)
    return True

