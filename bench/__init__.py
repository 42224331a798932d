"""`pdserve bench`: a load generator and benchmark for any OpenAI-compatible endpoint.

Pure core (workloads, prompts, statistics, report) and thin adapters (HTTP client, runner, CLI);
see README.md in this folder for the reading path.
"""
