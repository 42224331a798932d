"""`pdserve bench-router` on a toy fleet: the fleet it builds, what it times, the table."""

from __future__ import annotations

import random

from rich.console import Console

from pdserve.bench.router_bench import (
    PROMPT_BLOCKS,
    SHARED_BLOCKS,
    build_fleet,
    measure,
    prompts,
    render,
)


def test_the_fleet_holds_the_entries_asked_for_and_shares_a_prefix() -> None:
    fleet = build_fleet(4, 8_000, random.Random(1))
    held = [fleet.index.num_tracked_blocks(s.replica_id) for s in fleet.prefill + fleet.decode]
    assert held == [1_000] * 8
    depths = [fleet.index.num_cached_blocks(s.replica_id, fleet.shared) for s in fleet.decode]
    assert any(0 < d <= SHARED_BLOCKS for d in depths)
    for p in prompts(fleet, 5, random.Random(2)):
        assert len(p.block_hashes) == PROMPT_BLOCKS


def test_measure_reports_decision_times_memory_and_ingest_with_ratios() -> None:
    rows = [measure(2, 4_000, 30), measure(8, 4_000, 30)]
    for row in rows:
        assert 0 < row.decision_p50_us <= row.decision_p99_us
        assert row.ingest_events_per_s > 0 and row.entries == 4_000
    console = Console(record=True, width=200)
    console.print(render(rows))
    text = console.export_text()
    assert "1.00" in text and "0.0 M" in text
