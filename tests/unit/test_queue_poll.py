"""The engine's queue busy-poll cap: vLLM's real SpinCondition reader stops spinning after the
capped window, and the engine environment asks for the cap on CPU only (unless configured)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator

import pytest

from pdserve.config import PdserveConfig
from pdserve.engine.queue_poll import QUEUE_BUSY_POLL_ENV, cap_busy_poll, register
from pdserve.kv_transfer.connector_config import engine_environment
from pdserve.pool_config import CPU_QUEUE_BUSY_POLL_S

_ADDRESSES = itertools.count()
GPU = {"platform": "cuda", "prefill": {"num_gpus": 1}, "decode": {"num_gpus": 1}}


@pytest.fixture
def spin_condition() -> Iterator[type]:
    """vLLM's SpinCondition class, its `wait` restored afterwards."""
    from vllm.distributed.device_communicators.shm_broadcast import SpinCondition

    saved = SpinCondition.wait
    yield SpinCondition
    SpinCondition.wait = saved  # type: ignore[method-assign]


def _reader(cls: type) -> object:
    import zmq

    context = zmq.Context.instance()
    address = f"inproc://pdserve-poll-test-{next(_ADDRESSES)}"
    writer = cls(is_reader=False, context=context, notify_address=address)
    reader = cls(is_reader=True, context=context, notify_address=address)
    reader._writer = writer  # keep the publisher alive as long as the reader
    return reader


def _waits_until_it_sleeps(reader: object, timeout_ms: int) -> float:
    """Seconds of back-to-back wait() calls (each a spin step or, once the busy-poll window
    since the last read has passed, a sleep of up to `timeout_ms`) until one of them sleeps."""
    start = time.monotonic()
    reader.record_read()  # type: ignore[attr-defined]
    while True:
        before = time.monotonic()
        reader.wait(timeout_ms=timeout_ms)  # type: ignore[attr-defined]
        if time.monotonic() - before >= timeout_ms / 1000 * 0.8:
            return before - start


def test_vllms_reader_spins_a_second_after_a_read_and_the_cap_shortens_it(
    spin_condition: type,
) -> None:
    uncapped = _reader(spin_condition)
    assert uncapped.busy_loop_s == 1  # type: ignore[attr-defined]  # vLLM 0.32's built-in
    assert _waits_until_it_sleeps(uncapped, timeout_ms=50) >= 0.9
    assert cap_busy_poll(spin_condition, 0.02)
    capped = _reader(spin_condition)
    assert _waits_until_it_sleeps(capped, timeout_ms=50) < 0.2
    assert capped.busy_loop_s == 0.02  # type: ignore[attr-defined]
    assert cap_busy_poll(spin_condition, 0.05)  # again: the cap is replaced, not stacked
    assert spin_condition.wait._pdserve_cap_s == 0.05  # type: ignore[attr-defined]


def test_the_plugin_acts_only_when_the_engine_server_set_its_variable(
    spin_condition: type, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(QUEUE_BUSY_POLL_ENV, raising=False)
    register()
    assert not hasattr(spin_condition.wait, "_pdserve_cap_s")
    monkeypatch.setenv(QUEUE_BUSY_POLL_ENV, "0.01")
    register()
    assert spin_condition.wait._pdserve_cap_s == 0.01  # type: ignore[attr-defined]


def test_a_class_without_wait_is_left_alone() -> None:
    class NotVllms:
        pass

    assert cap_busy_poll(NotVllms, 0.02) is False


def test_the_engine_environment_caps_on_cpu_and_leaves_gpu_engines_to_vllm() -> None:
    cpu = engine_environment(PdserveConfig(), "decode", 1, "127.0.0.1")
    assert float(cpu[QUEUE_BUSY_POLL_ENV]) == CPU_QUEUE_BUSY_POLL_S
    gpu = PdserveConfig.model_validate(GPU)
    assert QUEUE_BUSY_POLL_ENV not in engine_environment(gpu, "prefill", 1, "127.0.0.1")
    tuned = PdserveConfig.model_validate(
        {**GPU, "prefill": {"num_gpus": 1, "engine": {"queue_busy_poll_seconds": 0.1}}}
    )
    assert float(engine_environment(tuned, "prefill", 1, "127.0.0.1")[QUEUE_BUSY_POLL_ENV]) == 0.1
    vllms = PdserveConfig.model_validate({"decode": {"engine": {"queue_busy_poll_seconds": 1}}})
    assert float(engine_environment(vllms, "decode", 1, "127.0.0.1")[QUEUE_BUSY_POLL_ENV]) == 1.0
