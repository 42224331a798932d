"""Human-readable numbers for the view (pure). Every formatter returns "—" for None."""

from __future__ import annotations

DASH = "—"


def fmt_seconds(value: float | None) -> str:
    """0.0123 -> "12.3 ms", 2.5 -> "2.50 s"."""
    if value is None:
        return DASH
    if value < 1.0:
        return f"{value * 1e3:.1f} ms"
    return f"{value:.2f} s"


def fmt_bytes(value: float | None) -> str:
    """Binary units, as KV block sizes are: 1536 -> "1.5 KiB"."""
    if value is None:
        return DASH
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" or value >= 100 else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def fmt_bandwidth(bytes_per_s: float | None) -> str:
    """Decimal units, as `pdserve kv-check` reports them: 2.5e9 -> "2.50 GB/s"."""
    if bytes_per_s is None:
        return DASH
    for scale, unit in ((1e9, "GB/s"), (1e6, "MB/s"), (1e3, "kB/s")):
        if bytes_per_s >= scale:
            return f"{bytes_per_s / scale:.2f} {unit}"
    return f"{bytes_per_s:.0f} B/s"


def fmt_rate(per_s: float | None) -> str:
    """Events per second: 0.25 -> "0.25/s"."""
    if per_s is None:
        return DASH
    return f"{per_s:.2f}/s" if per_s < 100 else f"{per_s:.0f}/s"


def fmt_ratio(ratio: float | None) -> str:
    """0-1 ratio as a percentage: 0.123 -> "12.3%"."""
    if ratio is None:
        return DASH
    return f"{ratio * 100:.1f}%"


def fmt_amount(value: float | None) -> str:
    """A count or a per-second amount, compact: 0.25 -> "0.25", 12.3 -> "12.3", 1234 -> "1234",
    12345 -> "12.3k", 2.5e6 -> "2.50M"."""
    if value is None:
        return DASH
    magnitude = abs(value)
    if magnitude >= 1e6:
        return f"{value / 1e6:.2f}M"
    if magnitude >= 1e4:
        return f"{value / 1e3:.1f}k"
    if magnitude >= 100 or value == int(value):
        return f"{value:.0f}"
    return f"{value:.2f}" if magnitude < 10 else f"{value:.1f}"
