"""Per-tenant limits (pure; clock injected): requests and tokens per minute as token buckets,
concurrent requests, the longest prompt, and OpenAI's `x-ratelimit-*` headers.

`TenantLimiter` is built once per router replica. Per request:
1. `admit(tenant)` before the body is parsed: one request from the requests bucket, one
   concurrency slot, and at least one token left in the tokens bucket;
2. `reserve_tokens(tenant, prompt, max_output)` once the prompt is tokenized: prompt tokens +
   the most output tokens it may generate (413 when that can never fit);
3. `settle(tenant, reserved, used)` when it ends: the reserved tokens it did not use go back;
4. `release(tenant)` when its response is over (the concurrency slot).
A refusal is a `TenantLimitExceeded` (429 with Retry-After) or `TenantRequestTooLarge` (413: no
retry can help). `headers(tenant)` are OpenAI's rate-limit headers for the tenant's buckets.
Each router replica enforces its `split`-th of every limit (docs/tenants.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from pdserve.router.admission import AdmissionRejected
from pdserve.router.errors import OpenAIError
from pdserve.router.tenants.directory import Tenant


class TenantLimitExceeded(AdmissionRejected):
    """429: the tenant is over one of its limits; retry after the advised seconds."""


class TenantRequestTooLarge(OpenAIError):
    """413: the request can never fit the tenant's limits (its prompt is longer than
    max_prompt_tokens, or prompt + max_tokens is more than its whole tokens-per-minute)."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(413, message, code="request_too_large", param=param)


class TokenBucket:
    """`capacity` tokens, refilled continuously at `capacity` per `period_s`. Starts full."""

    def __init__(self, capacity: float, period_s: float, now_s: float):
        if capacity <= 0 or period_s <= 0:
            raise ValueError(f"need capacity > 0 and period_s > 0, got {capacity}, {period_s}")
        self.capacity = capacity
        self._rate_per_s = capacity / period_s
        self._level = capacity
        self._at_s = now_s

    def level(self, now_s: float) -> float:
        """Tokens available now (negative after an overdraft)."""
        elapsed = max(0.0, now_s - self._at_s)
        self._level = min(self.capacity, self._level + elapsed * self._rate_per_s)
        self._at_s = max(self._at_s, now_s)
        return self._level

    def take(self, amount: float, now_s: float) -> bool:
        """Take `amount` if that many are available."""
        if self.level(now_s) < amount:
            return False
        self._level -= amount
        return True

    def adjust(self, amount: float, now_s: float) -> None:
        """Add `amount` (negative: take it even into overdraft), capped at capacity."""
        self._level = min(self.capacity, self.level(now_s) + amount)

    def wait_s(self, amount: float, now_s: float) -> float:
        """Seconds until `amount` is available (inf when it is more than the capacity)."""
        if amount > self.capacity:
            return math.inf
        return max(0.0, (amount - self.level(now_s)) / self._rate_per_s)

    def reset_s(self, now_s: float) -> float:
        """Seconds until the bucket is full again."""
        return max(0.0, (self.capacity - self.level(now_s)) / self._rate_per_s)


@dataclass
class _Usage:
    requests: TokenBucket | None
    tokens: TokenBucket | None
    max_concurrent: int | None
    max_prompt_tokens: int | None
    inflight: int = 0


PERIOD_S = 60.0


class TenantLimiter:
    """Every tenant's usage against its limits on this router replica."""

    def __init__(self, clock: Callable[[], float], split: int = 1):
        """`split`: router replicas sharing each limit (this one enforces ceil(limit/split))."""
        if split < 1:
            raise ValueError(f"split must be >= 1, got {split}")
        self._clock = clock
        self._split = split
        self._usage: dict[str, _Usage] = {}
        self._weights: dict[str, float] = {}

    def _of(self, tenant: Tenant) -> _Usage:
        usage = self._usage.get(tenant.name)
        if usage is None:
            lim, now = tenant.limits, self._clock()

            def share(limit: int | None) -> int | None:
                return None if limit is None else max(1, math.ceil(limit / self._split))

            rpm, tpm = share(lim.requests_per_minute), share(lim.tokens_per_minute)
            usage = _Usage(
                requests=None if rpm is None else TokenBucket(rpm, PERIOD_S, now),
                tokens=None if tpm is None else TokenBucket(tpm, PERIOD_S, now),
                max_concurrent=share(lim.max_concurrent_requests),
                max_prompt_tokens=lim.max_prompt_tokens,
            )
            self._usage[tenant.name] = usage
            self._weights[tenant.name] = tenant.weight
        return usage

    def inflight(self, tenant: Tenant) -> int:
        return self._of(tenant).inflight

    def admit(self, tenant: Tenant) -> None:
        """Take one request and a concurrency slot, or raise TenantLimitExceeded."""
        u, now = self._of(tenant), self._clock()
        if u.max_concurrent is not None and u.inflight >= u.max_concurrent:
            raise TenantLimitExceeded(
                "tenant_concurrency",
                f"tenant {tenant.name} has its maximum of {u.max_concurrent} requests in "
                "flight on this router (limits.max_concurrent_requests)",
                1.0,
            )
        if u.tokens is not None and u.tokens.level(now) < 1:
            raise TenantLimitExceeded(
                "tenant_tokens_per_minute",
                f"tenant {tenant.name} is over its tokens per minute "
                f"(limit {int(u.tokens.capacity)} on this router)",
                u.tokens.wait_s(1, now),
            )
        if u.requests is not None and not u.requests.take(1, now):
            raise TenantLimitExceeded(
                "tenant_requests_per_minute",
                f"tenant {tenant.name} is over its requests per minute "
                f"(limit {int(u.requests.capacity)} on this router)",
                u.requests.wait_s(1, now),
            )
        u.inflight += 1

    def reserve_tokens(self, tenant: Tenant, num_prompt: int, max_output: int) -> int:
        """Reserve the request's prompt + most output tokens; returns the number reserved.
        Raises TenantRequestTooLarge (413) or TenantLimitExceeded (429)."""
        u, now = self._of(tenant), self._clock()
        if u.max_prompt_tokens is not None and num_prompt > u.max_prompt_tokens:
            raise TenantRequestTooLarge(
                f"the prompt has {num_prompt} tokens; tenant {tenant.name} may send at most "
                f"{u.max_prompt_tokens} (limits.max_prompt_tokens)",
                "messages",
            )
        if u.tokens is None:
            return 0
        need = num_prompt + max_output
        if need > u.tokens.capacity:
            raise TenantRequestTooLarge(
                f"the prompt's {num_prompt} tokens plus max_tokens {max_output} are more than "
                f"tenant {tenant.name}'s {int(u.tokens.capacity)} tokens per minute on this "
                "router: send a shorter prompt or a smaller max_tokens",
                "max_tokens",
            )
        if not u.tokens.take(need, now):
            raise TenantLimitExceeded(
                "tenant_tokens_per_minute",
                f"tenant {tenant.name} has {max(0, int(u.tokens.level(now)))} of its tokens per "
                f"minute left on this router; this request needs {need} (prompt + max_tokens)",
                u.tokens.wait_s(need, now),
            )
        return need

    def settle(self, tenant: Tenant, reserved: int, used: int) -> None:
        """A request that reserved `reserved` tokens ended having used `used`."""
        u = self._of(tenant)
        if u.tokens is not None and reserved:
            u.tokens.adjust(reserved - used, self._clock())

    def refund_request(self, tenant: Tenant) -> None:
        """Give back the request `admit` took (the request was refused after it)."""
        u = self._of(tenant)
        if u.requests is not None:
            u.requests.adjust(1, self._clock())

    def release(self, tenant: Tenant) -> None:
        """The request's response is over: its concurrency slot is free."""
        u = self._of(tenant)
        u.inflight = max(0, u.inflight - 1)

    def within_share(self, tenant: Tenant, slots: int) -> bool:
        """Whether the tenant holds at most its weighted share of `slots` (the router's
        in-flight bound): slots x its weight / the total weight of the tenants with requests in
        flight (at least one slot). Its own admitted request counts."""
        active = sum(self._weights[name] for name, u in self._usage.items() if u.inflight > 0)
        mine = self._of(tenant)
        if mine.inflight == 0:
            active += tenant.weight
        share = max(1, math.floor(slots * tenant.weight / active))
        return mine.inflight <= share

    def headers(self, tenant: Tenant) -> list[tuple[bytes, bytes]]:
        """OpenAI's x-ratelimit-{limit,remaining,reset}-{requests,tokens} for the tenant's
        buckets (none for a limit it does not have)."""
        u, now = self._of(tenant), self._clock()
        out: list[tuple[bytes, bytes]] = []
        for kind, bucket in (("requests", u.requests), ("tokens", u.tokens)):
            if bucket is None:
                continue
            out += [
                (f"x-ratelimit-limit-{kind}".encode(), str(int(bucket.capacity)).encode()),
                (
                    f"x-ratelimit-remaining-{kind}".encode(),
                    str(max(0, math.floor(bucket.level(now)))).encode(),
                ),
                (f"x-ratelimit-reset-{kind}".encode(), duration_text(bucket.reset_s(now)).encode()),
            ]
        return out


def duration_text(seconds: float) -> str:
    """A duration as OpenAI's reset headers write it: '0s', '250ms', '1.5s', '6m0s'."""
    if seconds <= 0:
        return "0s"
    if seconds < 1:
        return f"{max(1, round(seconds * 1000))}ms"
    minutes, rest = divmod(seconds, 60.0)
    text = f"{rest:.3f}".rstrip("0").rstrip(".") + "s"
    return f"{int(minutes)}m{text}" if minutes else text
