"""pdserve against its peers on one machine: Ray Serve LLM's P/D app and a minimal floor.

`python -m pdserve.bench.peers` — see README.md in this folder for the command, what each
setup is, how serving-layer CPU is measured, and the reading path.
"""
