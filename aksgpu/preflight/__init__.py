"""Preflight: what a cluster will need from Azure before anyone runs `pulumi up`, computed offline
from the ClusterSpec: quota (quota.py), cost (prices.py: the table; cost.py: the estimate;
cost_report.py: its text and markdown; retail_prices.py: a fresh VM table from the Azure Retail
Prices API; tables.py: which price table a command uses), the GPU pools' capacity (capacity.py:
reservation cover, availability, quota, reliability-adjusted headroom, scale-out time) and the gate's
verdict history it reads (verdict_history.py). The address plan is spec/network.py's,
since validation uses it too; the deploy time reads the offline plan, so it is aksgpu.plan's
(deploy_time.py over critical_path.py and pool_ordering.py).

It reads aksgpu.spec, aksgpu.project (a project's own price table) and aksgpu.catalog.
"""
