"""Preflight: what can be known about a deployment before it runs, from the offline plan alone."""
