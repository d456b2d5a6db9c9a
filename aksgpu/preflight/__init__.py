"""Preflight: what a cluster will need from Azure before anyone runs `pulumi up`, computed offline
from the ClusterSpec and the offline plan: quota (quota.py), cost (prices.py: the table; cost.py:
the estimate; cost_report.py: its text and markdown; retail_prices.py: a fresh VM table from the
Azure Retail Prices API) and deploy time (deploy_time.py over critical_path.py and
pool_ordering.py). The address plan is spec/network.py's, since validation
uses it too.

It reads aksgpu.spec and aksgpu.catalog, and nothing of the CLI.
"""
