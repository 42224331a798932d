"""A vLLM general plugin (entry point `vllm.general_plugins`): two CPU placement fixes and
the KV-event publisher's bind address.

vLLM loads general plugins in every engine and worker process, before the NIXL connector
starts. Each fix acts only when the engine server set its environment variable, so the
plugin is inert everywhere else (including plain vLLM use in the same environment).

1. `PDSERVE_NIXL_PROGRESS_THREAD=0`: NIXL's Python agent starts its UCX progress thread with
   a zero poll delay, so every engine burns a full core while idle. On CPU the connector
   already progresses transfers from the engine loop (it polls transfer state and
   notifications every step), so pdserve turns that thread off there.
2. `PDSERVE_NIXL_KV_CORES=c1,c2`: on CPU the NIXL connector pins the worker's main compute
   thread to "the last core of each NUMA node" read from /sys, ignoring the engine's own
   OpenMP binding — so every engine on a node ends up on the same last core. pdserve reports
   the engine's own cores instead, so the pin stays inside the engine's core set.
3. `PDSERVE_KV_EVENTS_BIND=1`: vLLM's ZMQ KV-event publisher binds only wildcard endpoints
   (`tcp://*:PORT`, every interface of the host) and *connects* to any other address.
   pdserve gives each engine `tcp://<pod or node IP>:PORT` and has the publisher bind exactly
   that, so KV events are served on the pod's own address only.
"""

from __future__ import annotations

import os


def register() -> None:
    """vLLM general-plugin entry point (idempotent)."""
    if os.environ.get("PDSERVE_NIXL_PROGRESS_THREAD") == "0":
        _disable_nixl_progress_thread()
    cores = os.environ.get("PDSERVE_NIXL_KV_CORES")
    if cores:
        _pin_kv_cores([int(c) for c in cores.split(",") if c.strip()])
    if os.environ.get("PDSERVE_KV_EVENTS_BIND") == "1":
        _bind_kv_events_to_their_address()


def _bind_kv_events_to_their_address() -> None:
    try:
        from vllm.distributed.kv_events import EventPublisherFactory, ZmqEventPublisher
    except ImportError:
        return

    class AddressBoundZmqEventPublisher(ZmqEventPublisher):  # type: ignore[misc]
        """Binds every endpoint it is given (vLLM's binds only wildcards)."""

        @staticmethod
        def _is_bind_endpoint(endpoint: str) -> bool:
            return True

    # KVEventsConfig.publisher only admits "null" and "zmq": replace what "zmq" builds.
    EventPublisherFactory._registry["zmq"] = AddressBoundZmqEventPublisher


def _disable_nixl_progress_thread() -> None:
    import importlib

    for name in ("nixl_cu13", "nixl_cu12", "nixl"):
        try:
            api = importlib.import_module(f"{name}._api")
        except ImportError:
            continue
        init = api.nixl_agent_config.__init__
        defaults = list(init.__defaults__ or ())
        if defaults and defaults[0] is True:  # enable_prog_thread is the first parameter
            defaults[0] = False
            init.__defaults__ = tuple(defaults)


def _pin_kv_cores(cores: list[int]) -> None:
    try:
        from vllm.platforms.cpu import CpuPlatform
    except ImportError:
        return
    chosen = [max(cores)]

    def discover_numa_topology(cls: type) -> list[list[int]]:
        return [chosen]

    CpuPlatform.discover_numa_topology = classmethod(discover_numa_topology)
