"""`pdserve kv-check`: a NIXL fabric check between two agents (see README.md here).

Reading path: `cli.py` (options) -> `runner.py` (one run: start the peer, measure, build the
report) -> `agents.py` (the NIXL adapter: target and initiator agents) and `peer.py` (the target
side, a subprocess or `--serve` on another node) talking over `wire.py`. The pure parts, unit
tested without NIXL: `units.py` (sizes, iteration counts), `stats.py` (percentiles, bandwidth),
`transports.py` (parse UCX's own log into the transports it selected), `fabric.py` (classify
transports, check the expected fabric, detect a silent fallback to TCP), `report.py` (the
report and its JSON) and `render.py` (the rich table).
"""
