"""Waivers of aksgpu's security policies (aksgpu/policy/rules.yaml), per environment.

A waiver names a rule, the findings it covers (patterns matched against the finding's subject:
a pool's name, else the resource's name), why, and optionally until when. The Pulumi program
does not read them; `aksgpu plan`, `aksgpu validate` and the policy pack in a real preview do.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import date
from typing import TYPE_CHECKING

from pydantic import Field

from aksgpu.spec.base import Issue, SpecModel, did_you_mean

if TYPE_CHECKING:
    from aksgpu.spec import ClusterSpec

ISO_DATE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")
# A reason says why; these say nothing.
EMPTY_REASONS = frozenset({"todo", "tbd", "n/a", "na", "none", "-", "waived", "ok", "fixme", "later"})


class Waiver(SpecModel):
    """One accepted exception to a policy, with its reason."""

    rule: str = Field(min_length=1)
    """The id of the policy waived (`aksgpu policy list`)."""
    resources: list[str] = Field(default_factory=lambda: ["*"], min_length=1)
    """Which findings it covers: patterns (* and ? wildcards) matched against what each finding is about, a pool's name or else the resource's name, as `aksgpu plan` shows it. Default: every finding of the rule."""
    reason: str = Field(min_length=1)
    """Why the finding is accepted: what the rule would cost here and what limits the risk. Mandatory."""
    expires: str | None = None
    """The last day (YYYY-MM-DD) the waiver holds; after it the finding fails again, and so does the expired waiver. None: no expiry."""


class PolicySettings(SpecModel):
    """How aksgpu's security policies apply to this environment."""

    waivers: list[Waiver] = Field(default_factory=list)
    """Accepted exceptions, each with its rule, the findings it covers, a reason and an optional expiry date."""


def check_policy(spec: ClusterSpec) -> Iterator[Issue]:
    from aksgpu.policy.catalog import rule_ids

    known = rule_ids()
    seen: dict[str, int] = {}
    for index, waiver in enumerate(spec.policy.waivers):
        path = f"policy.waivers[{index}]"
        if waiver.rule not in known:
            yield Issue(f"{path}.rule", waiver.rule, "is not a rule of aksgpu's policy pack",
                        did_you_mean(waiver.rule, sorted(known)) + "see `aksgpu policy list` for the rule ids")
        if waiver.reason.strip().lower().rstrip(".") in EMPTY_REASONS or len(waiver.reason.strip()) < 10:
            yield Issue(f"{path}.reason", waiver.reason, "a waiver needs a reason that says why the finding is accepted",
                        "write what following the rule would cost here and what limits the risk")
        if waiver.expires is not None:
            try:
                if not ISO_DATE.fullmatch(waiver.expires):
                    raise ValueError
                date.fromisoformat(waiver.expires)
            except ValueError:
                yield Issue(f"{path}.expires", waiver.expires, "must be a date written YYYY-MM-DD",
                            'quote it as text, e.g. expires: "2027-03-31"')
        for p_index, pattern in enumerate(waiver.resources):
            if not pattern.strip():
                yield Issue(f"{path}.resources[{p_index}]", pattern, "an empty pattern matches nothing",
                            'name a pool or resource, or use "*" for every finding of the rule')
        if waiver.rule in seen:
            yield Issue(f"{path}.rule", waiver.rule, f"policy.waivers[{seen[waiver.rule]}] already waives this rule; "
                        "an environment's waivers merge with its preset's by rule, so each rule has one waiver",
                        "list every pool or resource in that waiver's resources")
        else:
            seen[waiver.rule] = index
