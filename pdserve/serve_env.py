"""Ray Serve's lean path: the environment `pdserve up` and the Helm chart give Ray Serve.

Pure: returns mappings, sets nothing. Who reads them: Ray Serve evaluates these variables once,
at import of `ray/serve/_private/constants.py`, in every process that runs Serve code — the
Serve controller and the application build task (on the head), the HTTP proxies, and every
replica (the router, prefill and decode servers, in worker processes that inherit the Ray node's
environment). So they must be in the environment of `ray start` on every node (the local
cluster), or of every Ray container (the chart; tests/chart/test_lean_serve.py checks that the
rendered env equals `lean_serve_env(None)`).

What RAY_SERVE_THROUGHPUT_OPTIMIZED=1 turns on in Ray Serve 2.60 (each can be overridden by its
own variable): user code and handle routing on the replica's main event loop
(RUN_USER_CODE_IN_SEPARATE_THREAD=0, RUN_ROUTER_IN_SEPARATE_LOOP=0), gRPC between deployment
handles (USE_GRPC_BY_DEFAULT=1), no per-request logs to stderr (LOG_TO_STDERR=0), a 1,000-record
log buffer per replica, the garbage collector frozen after start-up, and direct ingress
(ENABLE_DIRECT_INGRESS=1: the ingress replica serves HTTP itself on a port the controller
assigns from RAY_SERVE_DIRECT_INGRESS_MIN/MAX_HTTP_PORT, and the only proxy left runs on the
head).
"""

from __future__ import annotations

# With direct ingress the head still runs a Serve proxy; `pdserve up` moves it this far above
# router.port so that router.port is free for the router replica.
PROXY_PORT_OFFSET = 1000
# Ports the controller may hand to ingress replicas, from router.port up (the first replica on
# a node gets the lowest free one; a replaced replica's port is held back for a while).
DIRECT_INGRESS_HTTP_PORTS = 64
# Seconds a draining direct-ingress router still accepts requests (see lean_serve_env).
LOCAL_DRAINING_PERIOD_S = 2.0


def lean_serve_env(direct_ingress_port: int | None) -> dict[str, str]:
    """The Ray Serve settings of pdserve's lean path.

    `direct_ingress_port`: the port the router replica serves HTTP on itself (the local
    cluster: router.port, with the proxy moved to router.port + PROXY_PORT_OFFSET). None keeps
    HTTP on Serve's proxies at router.port, with every other setting the same (Kubernetes: the
    router Service needs a fixed target port, and a direct-ingress port moves whenever the
    router replica is replaced; docs/deploy-kubernetes.md explains).
    """
    env = {
        "RAY_SERVE_THROUGHPUT_OPTIMIZED": "1",
        # The controller's loop every 0.5 s instead of 0.1 s: at rest it was the cluster's
        # largest CPU user (~40 ms/s); replicas take 30+ s to start, so reacting within 0.5 s
        # instead of 0.1 s changes nothing a user sees.
        "RAY_SERVE_CONTROL_LOOP_INTERVAL_S": "0.5",
        # The throughput mode buffers 1,000 log records per replica before writing: with access
        # logs off, what is logged (pdserve's warnings: failures, fallbacks, dead engines) is
        # rare and wanted at once.
        "RAY_SERVE_REQUEST_PATH_LOG_BUFFER_SIZE": "1",
    }
    if direct_ingress_port is None:
        env["RAY_SERVE_ENABLE_DIRECT_INGRESS"] = "0"
        return env
    if not 1 <= direct_ingress_port <= 65535 - DIRECT_INGRESS_HTTP_PORTS:
        raise ValueError(
            f"direct ingress port {direct_ingress_port} leaves no room for "
            f"{DIRECT_INGRESS_HTTP_PORTS} ingress ports below 65536: pick a lower router.port"
        )
    env["RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT"] = str(direct_ingress_port)
    env["RAY_SERVE_DIRECT_INGRESS_MAX_HTTP_PORT"] = str(
        direct_ingress_port + DIRECT_INGRESS_HTTP_PORTS
    )
    # A stopping router replica keeps accepting for this long so that load balancers notice
    # (Ray's default 30 s). Nothing balances in front of the local cluster's router: the wait
    # only made every `pdserve down` 30 s longer.
    env["RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S"] = str(LOCAL_DRAINING_PERIOD_S)
    return env
