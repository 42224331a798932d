"""rich adapter: a `TopView` as one renderable (formatting and colour only, no logic).

Laid out to fit an 80x24 terminal for a small cluster: header, traffic lines, one table of
pools with their replicas, TTFT by input bucket with the p50 breakdown, the decode streams'
stall and the ITL guard's verdicts, KV transfer lines, and (when the router exports tenant
series) two tables of per-tenant usage, also used by `pdserve tenants usage`.
"""

from __future__ import annotations

import time

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from pdserve.top.model import RateRow, TopView
from pdserve.top.tenants import TenantRow
from pdserve.top.units import (
    DASH,
    fmt_amount,
    fmt_bandwidth,
    fmt_bytes,
    fmt_rate,
    fmt_ratio,
    fmt_seconds,
)

_VERDICT_STYLE = {"warn": "bold red", "ok": "green", "info": "yellow"}


def _num(value: float | None) -> str:
    return DASH if value is None else f"{value:.0f}"


def _table(title: str, *columns: str) -> Table:
    table = Table(title=title, title_justify="left", title_style="bold", box=None, pad_edge=False)
    for i, col in enumerate(columns):
        table.add_column(col, justify="left" if i == 0 else "right", no_wrap=True)
    return table


def _rates(rows: tuple[RateRow, ...], bad: bool = False) -> Text:
    text = Text()
    for i, row in enumerate(rows):
        style = "red" if bad and not row.label.startswith("2") and row.per_s > 0 else ""
        text.append(" · " if i else "")
        text.append(f"{row.label} {fmt_rate(row.per_s)}", style=style)
    return text if rows else Text(DASH)


def _traffic(view: TopView) -> Group:
    requests = Text.assemble(
        ("requests ", "bold"),
        fmt_rate(view.request_rate),
        "  (status ",
        _rates(view.statuses, bad=True),
        ")   ",
        ("tokens ", "bold"),
        f"in {fmt_rate(view.prompt_tokens_per_s)} out {fmt_rate(view.generation_tokens_per_s)}",
    )
    decisions = Text.assemble(
        ("decisions ", "bold"),
        _rates(view.decisions),
        "   ",
        ("refused (429) ", "bold"),
        fmt_rate(view.rejected_per_s),
        "   ",
        ("fallbacks ", "bold"),
        fmt_rate(view.fallbacks_per_s),
    )
    return Group(requests, decisions)


def _cluster(view: TopView) -> RenderableType:
    table = _table(
        "Pools and replicas", "pool / replica", "ready", "run", "wait", "queued tok", "KV use",
        "cached blk", "KV ev",
    )  # fmt: skip
    for p in view.pools:
        table.add_row(
            Text(p.pool, style="bold"),
            _num(p.ready_replicas),
            _num(p.running_requests),
            "",
            _num(p.queued_prefill_tokens),
            fmt_ratio(p.kv_cache_usage),
        )
        for r in (r for r in view.replicas if r.pool == p.pool):
            table.add_row(
                f" {r.replica_id}",
                "",
                str(r.running),
                str(r.waiting),
                "",
                fmt_ratio(r.kv_cache_usage),
                str(r.cached_blocks),
                Text("yes", style="green") if r.kv_events else Text("no", style="yellow"),
            )
    if view.replicas_note:
        return Group(table, Text(view.replicas_note, style="yellow"))
    return table


def _scaling(view: TopView) -> Group:
    """Elastic pools: replicas now / Serve's target / the policy's wish, the signal against
    its target, and the latest scale events with their reasons."""
    lines: list[RenderableType] = [Text("Autoscaling", style="bold")]
    for row in view.scaling:
        unit = " s" if row.pool == "prefill" else ""
        lines.append(
            Text(
                f" {row.pool}: {row.current_replicas} running · target {row.target_replicas}"
                f" · policy wants {row.wanted_replicas} · signal {row.signal:.2f}{unit}"
                f" (target {row.signal_target:g}{unit})"
            )
        )
    for e in view.scale_events:
        when = time.strftime("%H:%M:%S", time.localtime(e.unix_s))
        style = "green" if e.to_replicas > e.from_replicas else "yellow"
        lines.append(
            Text.assemble(
                f" {when} ",
                (f"{e.pool} {e.from_replicas} -> {e.to_replicas}", style),
                f"  {e.reason}",
            )
        )
    if not view.scale_events:
        lines.append(Text(" no scale event yet", style="dim"))
    return Group(*lines)


def _ttft(view: TopView) -> Group:
    table = _table("TTFT by input bucket", "input", "requests", "p50", "p99", "prefill p50")
    for row in view.ttft:
        table.add_row(
            row.input_bucket,
            _num(row.requests),
            fmt_seconds(row.p50_s),
            fmt_seconds(row.p99_s),
            fmt_seconds(row.prefill_p50_s),
        )
    if not view.ttft:
        table.add_row("(none)", "0", DASH, DASH, DASH)
    breakdown = Text(
        f"p50 queue {fmt_seconds(view.queue_p50_s)} · prefill {fmt_seconds(view.prefill_p50_s)}"
        f" · KV transfer {fmt_seconds(view.kv_transfer_p50_s)}"
    )
    return Group(table, breakdown)


def _decode_stall(view: TopView) -> Group:
    """The decode streams' wait on steps that carried prefill (stream-seconds per second, the
    step's p99) beside their ITL p99, and the ITL guard's verdicts on local prefills, counted
    over the window."""
    stall = view.decode_stall
    line = Text.assemble(("Decode stall ", "bold"))
    guard = Text.assemble(("ITL guard ", "bold"), "local prefill on decode: ")
    if stall is None:
        return Group(line.append(DASH), guard.append(DASH))
    if not stall.reported:
        line.append("not reported by the decode engines", style="dim")
    elif stall.stream_steps <= 0:
        line.append("none on prefill steps", style="green")
    else:
        rate = stall.stall_per_s
        line.append(
            f"{DASH if rate is None else f'{rate:.3g}'} stream-s/s on prefill steps"
            f" · p99 {fmt_seconds(stall.p99_s)}"
        )
    line.append(f" · ITL p99 {fmt_seconds(stall.itl_p99_s)}")
    verdicts = (f"{fmt_amount(n)} {v.replace('_', ' ')}" for v, n in stall.verdicts)
    return Group(line, guard.append(", ".join(verdicts)))


def _kv(view: TopView) -> Group:
    kv = view.kv
    line = Text.assemble(
        ("KV transfer ", "bold"),
        f"p50 {fmt_seconds(view.kv_transfer_p50_s)} p99 {fmt_seconds(view.kv_transfer_p99_s)}"
        f" · {fmt_rate(view.transfers_per_s)} · mean {fmt_bytes(kv.mean_bytes if kv else None)}"
        f" · {fmt_bandwidth(kv.bytes_per_s if kv else None)}",
    )
    checks = Text.assemble(
        ("KV integrity ", "bold"),
        f"checked {fmt_rate(view.kv_checks_per_s)} · recomputed ",
        _rates(view.kv_integrity_failures, bad=True)
        if any(r.per_s > 0 for r in view.kv_integrity_failures)
        else Text("none", style="green"),
    )
    verdict = view.verdict
    if verdict is None:
        return Group(line, checks, Text("collecting… (rates need two scrapes)", style="dim"))
    return Group(line, checks, Text(verdict.message, style=_VERDICT_STYLE[verdict.level]))


def _usage(row: TenantRow, total: float, with_totals: bool, bad: bool = False) -> Text:
    """A rate, or with `with_totals` the window's total above its rate."""
    rate = row.per_s(total)
    style = "red" if bad and total > 0 else ""
    if not with_totals:
        return Text(fmt_amount(rate), style=style)
    return Text(f"{fmt_amount(total)}\n{fmt_amount(rate)}/s", style=style)


def _reason(row: TenantRow) -> str:
    """The top 429 reason, without the `tenant_` its own-limit reasons start with."""
    reason = row.top_reason
    return DASH if reason is None else reason.removeprefix("tenant_")


def tenant_tables(rows: tuple[TenantRow, ...], with_totals: bool = False) -> Group:
    """Per-tenant usage as two tables (requests and tokens; cost and latency), each fitting 80
    columns. Cells are per-second rates, or with `with_totals` the window's total above its
    rate, and then a third table of fair-queue wait p99 by tier."""
    unit = "total and per second" if with_totals else "per second"
    traffic = _table(
        f"Tenants: requests and tokens ({unit})", "tenant", "requests", "429", "429 reason",
        "prompt", "cached", "output", "inflight",
    )  # fmt: skip
    cost = _table(
        f"Tenants: cost ({unit}) and latency", "tenant", "prefill s", "share", "KV blk·s",
        "TTFT p50", "TTFT p99", "ITL p99",
    )  # fmt: skip
    for r in rows:
        traffic.add_row(
            r.tenant,
            _usage(r, r.requests, with_totals),
            _usage(r, r.rejected, with_totals, bad=True),
            _reason(r),
            _usage(r, r.prompt_tokens, with_totals),
            _usage(r, r.cached_tokens, with_totals),
            _usage(r, r.output_tokens, with_totals),
            _num(r.inflight),
        )
        cost.add_row(
            r.tenant,
            _usage(r, r.prefill_s, with_totals),
            fmt_ratio(r.prefill_share),
            _usage(r, r.kv_block_s, with_totals),
            fmt_seconds(r.ttft_p50_s),
            fmt_seconds(r.ttft_p99_s),
            fmt_seconds(r.itl_p99_s),
        )
    if not with_totals:
        return Group(traffic, cost)
    queue = _table("", "tenant", "prefill", "decode")
    for r in rows:
        queue.add_row(
            r.tenant, fmt_seconds(r.queue_p99("prefill")), fmt_seconds(r.queue_p99("decode"))
        )
    title = Text("Tenants: fair-queue wait p99 by tier", style="bold")
    return Group(traffic, cost, title, queue)


def render(
    view: TopView,
    url: str,
    window_s: float,
    interval_s: float,
    clock_label: str,
    error: str | None = None,
) -> RenderableType:
    """The whole screen: header, error line (red), traffic, pools/replicas, TTFT, decode stall
    and ITL guard, KV, and the tenants' tables when the router exports tenant series."""
    if view.scrapes == 0:
        span = "no data yet"
    elif view.span_s is None:
        span = f"waiting for a 2nd scrape (every {interval_s:g} s)"
    else:
        span = f"rates over {view.span_s:.0f} s (window {window_s:g} s)"
    header = Text.assemble(("pdserve top", "bold"), f" · {url} · {clock_label} · {span}")
    parts: list[RenderableType] = [header]
    if error:
        parts.append(Text(error, style="bold red"))
    parts += [Text(""), _traffic(view), _cluster(view)]
    if view.scaling:
        parts.append(_scaling(view))
    parts += [_ttft(view), _decode_stall(view), _kv(view)]
    if view.tenants:
        parts.append(tenant_tables(view.tenants))
    return Group(*parts)
