"""The router's request path wired as router/deployment.py wires it, over the fakes: the
rig the orchestration tests (test_orchestrate.py, test_fallbacks.py) drive."""

from __future__ import annotations

from typing import Any

from pdserve.config import RouterConfig
from pdserve.messages import SamplingOptions
from pdserve.router.metrics import RouterMetrics
from pdserve.router.observe import RequestObservation, RouterObserver
from pdserve.router.orchestrate import Orchestrator
from pdserve.router.placement import Placer
from pdserve.router.prepare import PreparedRequest
from tests.unit.router.fakes import BLOCK_TOKENS, FakeDispatcher, StepClock, placer

LONG = 40 * BLOCK_TOKENS  # 640 tokens: remote prefill
SHORT = 20  # under local_prefill_max_cold_tokens=64 below: local prefill


def prepared(num_tokens: int, *, stream: bool = False, rid: str = "req-1") -> PreparedRequest:
    return PreparedRequest(
        request_id=rid,
        engine_request_id=f"{rid}-abcd",
        prompt_token_ids=[(7 * i) % 1000 for i in range(num_tokens)],
        sampling=SamplingOptions(max_tokens=3, temperature=0.0),
        priority=0,
        stream=stream,
    )


class Rig:
    """One router replica's request path, wired like router/deployment.py does."""

    def __init__(
        self,
        dispatcher: FakeDispatcher,
        the_placer: Placer | None,
        fallback: str = "fail",
        decode_fallback: str = "retry",
    ):
        self.dispatcher = dispatcher
        self.placer = the_placer
        self.metrics = RouterMetrics()
        self.observer = RouterObserver(self.metrics, the_placer, clock=StepClock())
        config = RouterConfig.model_validate(
            {
                "stream_batch_interval_ms": 50,
                "fallback": {"prefill": fallback, "decode": decode_fallback},
            }
        )
        self.orchestrator = Orchestrator(config, dispatcher, the_placer, clock=StepClock())

    def start(self, rid: str = "req-1") -> RequestObservation:
        return self.observer.start("completion", rid, f"{rid}-abcd", arrival_s=9.0)

    def sample(self, name: str, **labels: str) -> float:
        value = self.metrics.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value


def rig(fallback: str = "fail", **placer_args: Any) -> Rig:
    return Rig(FakeDispatcher(), placer(**placer_args), fallback)


async def drain(chunks: Any) -> list[Any]:
    return [c async for c in chunks]
