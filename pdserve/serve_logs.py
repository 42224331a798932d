"""pdserve's log records, written where Ray Serve writes each replica's own log.

Inside a Serve replica, Serve's logger (`ray.serve`) does not propagate, and the replica's
stdout/stderr are redirected into it at INFO level, below its configured level (WARNING in
pdserve's deployments). A record from a `pdserve.*` logger would reach Python's last-resort
handler, be written to that redirected stderr and dropped. `log_to_serve()` gives the
`pdserve` logger Serve's own handlers and level, so pdserve's warnings (failed requests,
fallbacks, unresponsive engines) land in `serve/replica_<app>_<deployment>_<id>.log` (and
on stderr where Serve logs there) with Serve's format and request context.
"""

from __future__ import annotations

import logging

SERVE_LOGGER = "ray.serve"
PDSERVE_LOGGER = "pdserve"


def log_to_serve() -> None:
    """Route the `pdserve` logger to Serve's replica log. Call in each replica's constructor
    (after Serve configured its logger); idempotent."""
    serve = logging.getLogger(SERVE_LOGGER)
    ours = logging.getLogger(PDSERVE_LOGGER)
    ours.handlers = list(serve.handlers)
    ours.setLevel(serve.level or logging.WARNING)
    ours.propagate = False
