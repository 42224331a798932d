"""Admission control (pure): refuse work a tier cannot take soon, fast, with a Retry-After.

Called per request by the HTTP layer (router in-flight bound, before tokenizing) and by the
`Placer` once the policy has chosen replicas (prefill backlog and decode stream bounds, from
the router's own bookkeeping). A refusal is an `AdmissionRejected` (HTTP 429, OpenAI code
`rate_limit_exceeded`, a `Retry-After` header estimated from the backlog) that the observer
counts in `pdserve_requests_rejected_total{reason}`.
"""

from __future__ import annotations

import math
from typing import Literal

from pdserve.router.errors import OpenAIError

RejectReason = Literal["router_inflight", "prefill_backlog", "decode_streams"]


class AdmissionRejected(OpenAIError):
    """429: the request was not admitted; retry after `retry_after_s`."""

    def __init__(self, reason: RejectReason, message: str, retry_after_s: float):
        seconds = max(1, math.ceil(retry_after_s))
        super().__init__(
            429,
            f"{message}; retry in about {seconds} s",
            code="rate_limit_exceeded",
            headers={"retry-after": str(seconds)},
        )
        self.reason: RejectReason = reason
        self.retry_after_s = seconds


def check_inflight(num_inflight: int, limit: int | None) -> None:
    """Raise unless one more request fits under the router's in-flight bound."""
    if limit is not None and num_inflight >= limit:
        raise AdmissionRejected(
            "router_inflight",
            f"the router is serving its maximum of {limit} requests "
            "(router.admission.max_inflight_requests)",
            1.0,
        )


def check_prefill_backlog(
    replica_id: str, backlog_s: float, est_prefill_s: float, limit_s: float | None
) -> None:
    """Raise if sending a prefill estimated at `est_prefill_s` would push the replica's
    queued estimate past `limit_s`. An idle replica (no backlog) always takes one."""
    if limit_s is None or backlog_s <= 0.0 or backlog_s + est_prefill_s <= limit_s:
        return
    raise AdmissionRejected(
        "prefill_backlog",
        f"prefill replica {replica_id} has {backlog_s:.1f} s of prefill queued "
        f"(router.admission.max_prefill_backlog_seconds: {limit_s:g})",
        backlog_s + est_prefill_s - limit_s,
    )


def check_decode_streams(replica_id: str, num_streams: int, limit: int | None) -> None:
    """Raise unless the decode replica can take one more stream from this router."""
    if limit is not None and num_streams >= limit:
        raise AdmissionRejected(
            "decode_streams",
            f"decode replica {replica_id} is streaming its maximum of {limit} requests "
            "(router.admission.max_decode_streams)",
            1.0,
        )
