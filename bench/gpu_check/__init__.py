"""The GPU check (scripts/gpu-check.sh): the Python parts of one end-to-end run of pdserve on
one GPU: the run config and reference server arguments (`run_config`), the token-identity
check against aggregated vLLM (`identity`), the summary table (`summary`), and the command
line the script calls (`cli`, `python -m pdserve.bench.gpu_check`). See docs/gpu-check.md.
"""
