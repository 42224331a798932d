"""How long prefill and decode steps take, as a small analytic model fitted per deployment.

Called by the routing pipeline a few times per request (one prefill estimate per candidate
replica), so it is plain arithmetic. `CostModel.fit` is called offline by `pdserve profile`
with measured samples; the defaults are rough values for the tiny demo model on CPU.

    est_prefill_s(u, c) = fixed_overhead_s + per_token_s * u + per_token_sq_s * u * (u / 2 + c)

for u uncached (computed) tokens after c cached tokens: every new token attends to the c
cached tokens and, on average, half of the u new ones, so attention adds u * (u/2 + c).

    est_decode_step_s(b, ctx) = decode_base_s + decode_per_seq_s * b
                                + decode_per_context_token_s * ctx

for a batch of b sequences holding ctx context tokens in total.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import Field

from pdserve.router.policy.strict import StrictModel


@dataclass(frozen=True, slots=True)
class PrefillSample:
    """One measured prefill: `seconds` to compute `num_uncached_tokens` after cached ones."""

    num_uncached_tokens: int
    num_cached_tokens: int
    seconds: float


@dataclass(frozen=True, slots=True)
class DecodeSample:
    """One measured decode step: `step_s` for `batch_size` sequences, `context_tokens` total."""

    batch_size: int
    context_tokens: int
    step_s: float


@dataclass(frozen=True, slots=True)
class FitResult:
    """What `CostModel.fit` returns: the model and human notes (clamped or kept coefficients)."""

    model: CostModel
    notes: tuple[str, ...]


_PREFILL_FIELDS = ("fixed_overhead_s", "per_token_s", "per_token_sq_s")
_DECODE_FIELDS = ("decode_base_s", "decode_per_seq_s", "decode_per_context_token_s")


class CostModel(StrictModel):
    """Prefill and decode cost coefficients (seconds). All >= 0, so estimates are monotone."""

    fixed_overhead_s: float = Field(
        default=0.02, ge=0, description="Prefill cost paid per request whatever its length."
    )
    per_token_s: float = Field(
        default=1e-4, ge=0, description="Prefill seconds per computed (uncached) token."
    )
    per_token_sq_s: float = Field(
        default=1e-8,
        ge=0,
        description="Attention term: seconds per (uncached token x context token it attends to).",
    )
    kv_transfer_per_token_s: float = Field(
        default=2e-5,
        ge=0,
        description=(
            "KV transfer seconds per prompt token moved from prefill to decode (the remote "
            "option's extra term in the predicted time to first token). Not fitted by "
            "`pdserve profile` yet: set it from `pdserve kv-check` (bytes per token / "
            "bandwidth) or the pdserve_kv_transfer_seconds histogram."
        ),
    )
    remote_fixed_s: float = Field(
        default=0.01,
        ge=0,
        description=(
            "Fixed seconds a remote prefill adds to the time to first token over a local one: "
            "the extra serving hops (to the prefill replica, back, then to decode) and the KV "
            "transfer's setup. Part of the remote option's predicted TTFT with the per-token "
            "transfer term; `pdserve profile` measures it on the idle cluster."
        ),
    )
    decode_base_s: float = Field(default=0.01, ge=0, description="Decode step fixed cost.")
    decode_per_seq_s: float = Field(
        default=5e-4, ge=0, description="Decode step seconds per sequence in the batch."
    )
    decode_per_context_token_s: float = Field(
        default=1e-7, ge=0, description="Decode step seconds per context token in the batch."
    )

    def est_prefill_s(self, num_uncached_tokens: int, num_cached_tokens: int) -> float:
        """Estimated seconds to prefill `num_uncached_tokens` after `num_cached_tokens`."""
        u = num_uncached_tokens
        return (
            self.fixed_overhead_s
            + self.per_token_s * u
            + self.per_token_sq_s * u * (u / 2 + num_cached_tokens)
        )

    def est_backlog_s(self, num_queued_tokens: int, num_queued_requests: int = 0) -> float:
        """Lower-bound seconds for an engine's reported queue: its prompts' fixed costs, the
        tokens' linear term, and their attention as if the tokens were split evenly between
        the prompts (the snapshot does not say how they are split; for n prompts of t tokens
        in all, the sum of u_i^2 / 2 is smallest when each has t / n, so this stays a lower
        bound). Cached prefixes the prompts attend to are not counted either."""
        t = num_queued_tokens
        n = num_queued_requests
        attention = self.per_token_sq_s * t * t / (2 * n) if n > 0 else 0.0
        return self.fixed_overhead_s * n + self.per_token_s * t + attention

    def est_transfer_s(self, num_tokens: int) -> float:
        """Estimated seconds to move `num_tokens` tokens' KV from prefill to decode."""
        return self.kv_transfer_per_token_s * num_tokens

    def est_remote_extra_s(self, num_tokens: int) -> float:
        """What the remote option adds to the time to first token: its fixed cost
        (`remote_fixed_s`) and the KV transfer of `num_tokens` tokens."""
        return self.remote_fixed_s + self.est_transfer_s(num_tokens)

    def est_decode_step_s(self, batch_size: int, context_tokens: int) -> float:
        """Estimated seconds of one decode step: `batch_size` sequences, `context_tokens` total."""
        return (
            self.decode_base_s
            + self.decode_per_seq_s * batch_size
            + self.decode_per_context_token_s * context_tokens
        )

    @classmethod
    def fit(
        cls,
        prefill_samples: Sequence[PrefillSample],
        decode_samples: Sequence[DecodeSample],
        *,
        base: CostModel | None = None,
    ) -> FitResult:
        """Least-squares fit of the coefficients from measured samples (called by `pdserve
        profile`, offline), on relative residuals: each sample's row and time are divided by
        its time, so a 10 ms prompt weighs as much as a 500 ms one (plain least squares on
        seconds lets the longest prompts set the line and leaves short prompts' times off
        by half or more).

        Either list may be empty: that half keeps `base`'s coefficients (the defaults when
        `base` is None) and a note says so. A coefficient the unconstrained fit makes negative
        is clamped to 0 and the others are refitted without it (non-negative least squares by
        active set), with a note. Raises ValueError when the samples cannot determine the
        coefficients (fewer than 3 with a positive time, or no variation in a feature); a
        sample whose time is not positive is left out, with a note.
        """
        start = base if base is not None else cls()
        values = start.model_dump()
        notes: list[str] = []
        if prefill_samples:
            rows = [(1.0, float(s.num_uncached_tokens), _attention(s)) for s in prefill_samples]
            coef = _nnls(rows, [s.seconds for s in prefill_samples], _PREFILL_FIELDS, notes)
            values.update(zip(_PREFILL_FIELDS, coef, strict=True))
        else:
            notes.append("no prefill samples: prefill coefficients kept")
        if decode_samples:
            rows = [(1.0, float(s.batch_size), float(s.context_tokens)) for s in decode_samples]
            coef = _nnls(rows, [s.step_s for s in decode_samples], _DECODE_FIELDS, notes)
            values.update(zip(_DECODE_FIELDS, coef, strict=True))
        else:
            notes.append("no decode samples: decode coefficients kept")
        return FitResult(model=cls.model_validate(values), notes=tuple(notes))


def _attention(s: PrefillSample) -> float:
    u = float(s.num_uncached_tokens)
    return u * (u / 2 + s.num_cached_tokens)


def _nnls(
    rows: Sequence[tuple[float, ...]], y: Sequence[float], names: Sequence[str], notes: list[str]
) -> list[float]:
    """Least squares on relative residuals ((row . coef - y) / y) with coefficients >= 0:
    solve, drop (fix at 0) negative ones, re-solve."""
    if len(rows) < len(names):
        raise ValueError(
            f"need at least {len(names)} samples to fit {', '.join(names)}; got {len(rows)}"
        )
    kept = [(r, t) for r, t in zip(rows, y, strict=True) if t > 0]
    if len(kept) < len(rows):
        notes.append(
            f"{len(rows) - len(kept)} sample(s) with no measured time left out of "
            f"{', '.join(names)}"
        )
    if len(kept) < len(names):
        raise ValueError(
            f"need at least {len(names)} samples with a positive time to fit "
            f"{', '.join(names)}; got {len(kept)}"
        )
    rows = [tuple(v / t for v in r) for r, t in kept]
    y = [1.0] * len(kept)
    active = list(range(len(names)))
    while True:
        sub = [[r[j] for j in active] for r in rows]
        sol = _lstsq(sub, y, [names[j] for j in active])
        negative = [k for k, v in enumerate(sol) if v < 0]
        if not negative:
            out = [0.0] * len(names)
            for k, j in enumerate(active):
                out[j] = sol[k]
            return out
        worst = min(negative, key=lambda k: sol[k])
        notes.append(
            f"{names[active[worst]]} fitted negative ({sol[worst]:.3g}): clamped to 0 "
            "and the other coefficients refitted"
        )
        del active[worst]
        if not active:
            return [0.0] * len(names)


def _lstsq(
    rows: Sequence[Sequence[float]], y: Sequence[float], names: Sequence[str]
) -> list[float]:
    """Ordinary least squares (`numpy.linalg.lstsq`) on max-abs-scaled columns, so features
    spanning 1 .. 1e7 weigh alike; a singular value under 1e-6 of the largest means the
    samples do not determine the coefficients."""
    x = np.asarray(rows, dtype=np.float64)
    scale = np.abs(x).max(axis=0)
    scale[scale == 0] = 1.0
    sol, _, rank, _ = np.linalg.lstsq(x / scale, np.asarray(y, dtype=np.float64), rcond=1e-6)
    if rank < len(names):
        raise ValueError(
            f"samples do not determine {', '.join(names)}: vary the inputs (token counts, "
            "batch sizes) across samples"
        )
    return [float(v) for v in sol / scale]
