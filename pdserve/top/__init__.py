"""`pdserve top`: a live terminal view of a running pdserve cluster.

Pure parts: `scrape` (parsed /metrics samples), `window` (the last N seconds of scrapes and
their deltas), `quantile` (Prometheus-style histogram quantiles), `bandwidth` (KV bandwidth vs
the kv-check fabric baseline), `tenants` (per-tenant usage over the window, also behind
`pdserve tenants usage`), `stall` (the decode streams' wait on prefill-carrying steps and the
ITL guard's verdicts), `model` (every table row as plain data). Thin adapters: `poll`
(HTTP) and `render` (rich); `cli` is the typer command registered in pdserve/cli.py.
"""
