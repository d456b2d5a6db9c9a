"""The gate's verdict history behind the plan's capacity section, on the command line:
`verdict-history query` (how to export it) and `verdict-history import` (merge an export into the
checked-in snapshot). The domain is aksgpu/preflight/verdict_history.py and capacity.py."""
