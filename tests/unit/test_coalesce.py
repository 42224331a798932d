"""Stream coalescing in the decode replica (pure; a fake clock and fake outputs)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from pdserve.decode_pool.coalesce import coalesce


@dataclass
class Out:
    """Stands in for vLLM's RequestOutput: a text delta that can absorb the next one."""

    text: str
    finished: bool = False
    merged: list[str] = field(default_factory=list)

    def add(self, next_output: Out, aggregate: bool) -> None:
        assert aggregate
        self.text += next_output.text
        self.finished |= next_output.finished


class Clock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


class Source:
    """Yields outputs, advancing the clock by each one's delay before it 'arrives'."""

    def __init__(self, clock: Clock, items: list[tuple[float, Out]]):
        self._clock = clock
        self._items = items
        self.closed = False

    def __aiter__(self) -> AsyncIterator[Out]:
        return self._gen()

    async def _gen(self) -> AsyncIterator[Out]:
        try:
            for delay_s, out in self._items:
                self._clock.now_s += delay_s
                yield out
        finally:
            self.closed = True


def _run(items: list[tuple[float, Out]], interval_s: float) -> list[tuple[float, str, bool]]:
    clock = Clock()
    source = Source(clock, items)

    async def main() -> list[tuple[float, str, bool]]:
        return [
            (round(clock.now_s, 6), o.text, o.finished)
            async for o in coalesce(aiter(source), interval_s, clock)
        ]

    return asyncio.run(main())


def _steps(n: int, step_s: float) -> list[tuple[float, Out]]:
    return [(step_s, Out(f"t{i} ", finished=i == n - 1)) for i in range(n)]


def test_first_token_goes_at_once_then_one_message_per_interval() -> None:
    # Binary fractions keep the fake clock exact: 12 steps of 1/8 s, interval 1/2 s.
    got = _run(_steps(12, 0.125), interval_s=0.5)
    assert got[0] == (0.125, "t0 ", False)  # time to first token untouched
    times = [t for t, _, _ in got]
    # First at once, then one message per interval, then the finish at once.
    assert times == [0.125, 0.625, 1.125, 1.5]
    assert "".join(text for _, text, _ in got) == "".join(f"t{i} " for i in range(12))
    assert [f for _, _, f in got] == [False, False, False, True]


def test_finish_is_never_held_back() -> None:
    got = _run(_steps(3, 0.01), interval_s=10.0)
    assert got == [(0.01, "t0 ", False), (0.03, "t1 t2 ", True)]


def test_zero_interval_passes_every_output_through() -> None:
    got = _run(_steps(5, 0.01), interval_s=0.0)
    assert [text for _, text, _ in got] == [f"t{i} " for i in range(5)]


def test_infinite_interval_sends_first_token_and_the_rest_at_the_end() -> None:
    got = _run(_steps(40, 0.01), interval_s=math.inf)
    assert len(got) == 2 and got[1][2] is True
    assert got[1][1] == "".join(f"t{i} " for i in range(1, 40))


def test_a_source_that_ends_without_finishing_still_delivers_what_was_held() -> None:
    items = [(0.01, Out("a")), (0.01, Out("b")), (0.01, Out("c"))]
    got = _run(items, interval_s=1.0)
    assert [text for _, text, _ in got] == ["a", "bc"]


def test_slow_steps_pass_through_one_by_one() -> None:
    # Steps slower than the interval: nothing is held, every output goes at once.
    got = _run(_steps(4, 0.2), interval_s=0.05)
    assert [t for t, _, _ in got] == [0.2, 0.4, 0.6, 0.8]


def test_closing_the_stream_early_closes_the_source() -> None:
    clock = Clock()
    source = Source(clock, _steps(10, 0.01))

    async def main() -> None:
        stream = coalesce(aiter(source), 0.05, clock)
        first = await anext(stream)
        assert first.text == "t0 "
        await stream.aclose()  # e.g. the client went away

    asyncio.run(main())
    assert source.closed
