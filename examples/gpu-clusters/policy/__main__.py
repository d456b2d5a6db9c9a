"""The policy pack: aksgpu's security policies, served to the Pulumi engine."""

from aksgpu.policy.pack import run

run()
