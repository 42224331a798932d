"""The vLLM engine host shared by the prefill and decode pools.

Reading path: `args.py` (config → vLLM engine args, pure) → `stats.py` (counters fed by vLLM's
stat-logger hook) → `server.py` (owns one in-process AsyncLLM: environment, start, stats,
shutdown) → `replica.py` (the Ray Serve deployment base both pools subclass). The requests
themselves are role-specific: `pdserve.prefill_pool.produce`, `pdserve.decode_pool.stream`.
"""
