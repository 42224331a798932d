"""StartDeadline: the timer that kills a hung engine start's processes (real child processes)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest

from pdserve.engine.start_deadline import StartDeadline
from pdserve.pool_config import PoolConfig


@pytest.fixture
def sleeper() -> Iterator[psutil.Process]:
    """A child process that would run for a minute (stands in for a hung engine core)."""
    popen = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield psutil.Process(popen.pid)
    popen.kill()
    popen.wait()


def _gone(proc: psutil.Process, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def test_a_start_past_its_deadline_has_its_processes_killed(sleeper: psutil.Process) -> None:
    with StartDeadline(0.2, lambda: [sleeper]) as deadline:
        time.sleep(0.5)  # the start hangs past the deadline
        assert deadline.fired
    assert _gone(sleeper)
    assert deadline.killed_pids == [sleeper.pid]
    assert not deadline.disarm()  # too late: the start did not finish in time


def test_a_start_that_finishes_in_time_keeps_its_processes(sleeper: psutil.Process) -> None:
    with StartDeadline(0.3, lambda: [sleeper]) as deadline:
        assert deadline.disarm()
    time.sleep(0.5)  # past the deadline: the cancelled timer must not fire
    assert not deadline.fired
    assert sleeper.is_running() and sleeper.status() != psutil.STATUS_ZOMBIE
    assert deadline.killed_pids == []


def test_expire_kills_after_disarm_when_the_rest_of_the_start_runs_out(
    sleeper: psutil.Process,
) -> None:
    """The engine came up in time, then its warm-up outlived the deadline's remainder."""
    deadline = StartDeadline(60.0, lambda: [sleeper])
    with deadline:
        assert deadline.disarm()
    deadline.expire()
    assert deadline.fired and _gone(sleeper)
    deadline.expire()  # once only
    assert deadline.killed_pids == [sleeper.pid]


def test_the_default_deadline_depends_on_the_platform() -> None:
    assert PoolConfig().engine_start_timeout_s("cpu") == 240.0
    assert PoolConfig().engine_start_timeout_s("gpu") == 1200.0
    pool = PoolConfig(engine_start_timeout_seconds=45)
    assert pool.engine_start_timeout_s("cpu") == pool.engine_start_timeout_s("gpu") == 45
    with pytest.raises(ValueError):
        PoolConfig(engine_start_timeout_seconds=0)
