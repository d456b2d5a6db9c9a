"""The Pulumi program: each stack's aksgpu:cluster config becomes an AKS GPU cluster."""

from aksgpu.program import run

run()
