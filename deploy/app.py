"""The Ray Serve application: Router (ingress) → PrefillServer, DecodeServer (aggregated
mode: Router → DecodeServer only).

`build_app(args)` is the application builder that `pdserve up`, `serve run` and the Helm
chart's serveConfigV2 all use: `import_path: pdserve.deploy.app:build_app`, with the pdserve
config (the YAML schema of pdserve.config) as `args`.
"""

from __future__ import annotations

from typing import Any

from ray import serve
from ray.serve import Application
from ray.serve.config import RequestRouterConfig

from pdserve.config import AutoscalingConfig, PdserveConfig, parse_config
from pdserve.decode_pool.server import DecodeServer
from pdserve.names import PoolName
from pdserve.pool_config import PoolConfig
from pdserve.prefill_pool.server import PrefillServer
from pdserve.router.deployment import Router
from pdserve.router_config import RouterConfig

# Ray gives the head node this resource (ray._common.constants.HEAD_NODE_RESOURCE_NAME).
HEAD_NODE_RESOURCE = "node:__internal_head__"
GRACEFUL_SHUTDOWN_CHECK_S = 0.5
"""How often a stopping replica checks whether its requests are done (Ray Serve's default is
2 s): an idle replica stops half a second after it is told to, not two."""


def _logging(config: PdserveConfig) -> dict[str, Any]:
    """Ray Serve's per-request access log costs CPU on every hop; off unless asked for."""
    return {"enable_access_log": config.router.access_log, "log_level": "WARNING"}


def _pool_options(
    pool: PoolConfig, role: PoolName, stats_period_s: float, busy_wait_s: float
) -> dict[str, Any]:
    opts: dict[str, Any] = {
        # pdserve's request router places each request on the replica the policy chose.
        "request_router_config": RequestRouterConfig(
            request_router_class="pdserve.router.replica_router.PdserveRequestRouter",
            request_router_kwargs={"pool": role, "busy_replica_wait_s": busy_wait_s},
            request_routing_stats_period_s=stats_period_s,
            request_routing_stats_timeout_s=max(2.0, 4 * stats_period_s),
        ),
        "ray_actor_options": {
            "num_cpus": pool.num_cpus,
            "num_gpus": pool.num_gpus,
            **({"resources": dict(pool.ray_resources)} if pool.ray_resources else {}),
        },
        "max_ongoing_requests": pool.max_ongoing_requests,
        # Engines take 30-60 s to start on CPU, minutes for big models on GPU.
        "health_check_timeout_s": 120,
        # check_health asks the engine; a dead one is replaced within a period of dying.
        "health_check_period_s": 5,
        # Scale-down drains: Serve stops routing to the replica at once, waits (checking
        # every half second) until its requests are done, and kills it after this bound.
        "graceful_shutdown_wait_loop_s": GRACEFUL_SHUTDOWN_CHECK_S,
        "graceful_shutdown_timeout_s": pool.graceful_shutdown_seconds,
    }
    if pool.autoscaling is None:
        opts["num_replicas"] = pool.num_replicas
    else:
        opts["autoscaling_config"] = autoscaling_options(pool.autoscaling, pool, role)
    return opts


def autoscaling_options(a: AutoscalingConfig, pool: PoolConfig, role: PoolName) -> dict[str, Any]:
    """Ray Serve's autoscaling_config for one pool: bounds and delays, and under policy 'slo'
    pdserve's own policy (`PoolPolicy`) on the signals each replica reports."""
    opts: dict[str, Any] = {
        "min_replicas": a.min_replicas,
        "initial_replicas": max(a.min_replicas, min(pool.num_replicas, a.max_replicas)),
        "max_replicas": a.max_replicas,
        "upscale_delay_s": a.upscale_delay_seconds,
        "downscale_delay_s": a.downscale_delay_seconds,
        "metrics_interval_s": a.metrics_interval_seconds,
        "look_back_period_s": a.look_back_period_seconds,
    }
    if a.policy == "ongoing_requests":
        opts["target_ongoing_requests"] = a.target_ongoing_requests
        return opts
    kwargs: dict[str, Any] = {"pool": role, "down_fraction": a.down_fraction}
    kwargs.update(a.slo_targets(role))
    opts["policy"] = {
        "policy_function": "pdserve.autoscaling.serve_policy:PoolPolicy",
        "policy_kwargs": kwargs,
    }
    return opts


def router_options(router: RouterConfig) -> dict[str, Any]:
    """The Router deployment's options: its replicas (fixed, or Ray Serve's request-based
    autoscaling) and placement."""
    opts: dict[str, Any] = {
        # On the head node, where `pdserve up` and `pdserve up --head` print the cluster's URL:
        # with direct ingress (the local cluster, one router) the router replica serves HTTP
        # itself, on the node it runs on; otherwise the head's proxy (and, under the Helm
        # chart, every node's) forwards to it. Every router replica serves its own /metrics on
        # the head too (router.metrics_ports), where Prometheus scrapes them.
        "ray_actor_options": {
            "num_cpus": router.num_cpus,
            "resources": {HEAD_NODE_RESOURCE: 0.001},
        },
        "max_ongoing_requests": 1024,
    }
    a = router.autoscaling
    if a is None:
        opts["num_replicas"] = router.num_replicas
    else:
        opts["autoscaling_config"] = {
            "min_replicas": a.min_replicas,
            "initial_replicas": max(a.min_replicas, min(router.num_replicas, a.max_replicas)),
            "max_replicas": a.max_replicas,
            "target_ongoing_requests": a.target_ongoing_requests,
        }
    return opts


def build_from_config(config: PdserveConfig) -> Application:
    """The bound application for a validated config."""
    raw = config.model_dump(mode="json")
    period = config.router.routing_stats_period_seconds
    busy_wait = config.router.deadlines.busy_replica_wait_seconds
    logging = _logging(config)
    decode = serve.deployment(DecodeServer, name="DecodeServer").options(
        **_pool_options(config.decode, "decode", period, busy_wait), logging_config=logging
    )
    router = serve.deployment(serve.ingress()(Router), name="Router").options(
        **router_options(config.router), logging_config=logging
    )
    if config.aggregated:  # no prefill pool: the decode engines prefill every prompt
        return router.bind(raw, None, decode.bind(raw))
    prefill = serve.deployment(PrefillServer, name="PrefillServer").options(
        **_pool_options(config.prefill, "prefill", period, busy_wait), logging_config=logging
    )
    return router.bind(raw, prefill.bind(raw), decode.bind(raw))


def build_app(args: dict[str, Any]) -> Application:
    """Ray Serve application builder: `args` is a pdserve config mapping."""
    return build_from_config(parse_config(dict(args), origin="application args"))
