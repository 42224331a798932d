"""Length limits (`--max-input-tokens`, `--max-output-tokens`, `--clip-mode`), pure."""

from __future__ import annotations

from dataclasses import dataclass

from pdserve.bench.config import BenchConfig


@dataclass(frozen=True)
class Limited:
    """Lengths after the limits, and which of them were cut."""

    input_tokens: int
    output_tokens: int
    input_clipped: bool
    output_clipped: bool


def apply_limits(cfg: BenchConfig, input_tokens: int, output_tokens: int) -> Limited | None:
    """The lengths to send, or None when `--clip-mode skip` drops an over-long request."""
    max_in = cfg.max_input_tokens or input_tokens
    max_out = cfg.max_output_tokens or output_tokens
    over_in, over_out = input_tokens > max_in, output_tokens > max_out
    if (over_in or over_out) and cfg.clip_mode == "skip":
        return None
    return Limited(min(input_tokens, max_in), min(output_tokens, max_out), over_in, over_out)
