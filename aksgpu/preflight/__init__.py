"""Preflight: what a cluster will cost before it is deployed, from its ClusterSpec and a dated
price table (prices.py: the table; cost.py: the estimate; cost_report.py: its text and markdown;
retail_prices.py: a fresh VM table from the Azure Retail Prices API).

It reads aksgpu.components.spec and aksgpu.components.data, and nothing of the CLI.
"""
