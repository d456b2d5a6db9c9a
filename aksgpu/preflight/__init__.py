"""Preflight: what a cluster will need from Azure before anyone runs `pulumi up` (quota, addresses,
cost, deploy time), computed offline from the ClusterSpec and the offline plan. Imports the spec
and the data tables, never the CLI."""
