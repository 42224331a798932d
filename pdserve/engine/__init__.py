"""The vLLM engine wrapper shared by the prefill and decode servers.

Reading path: `args.py` (config → vLLM engine args, pure) → `stats.py` (counters fed by vLLM's
stat-logger hook) → `server.py` (owns one in-process AsyncLLM: prefill, decode, abort, close).
"""
