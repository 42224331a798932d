"""Deploy Ray Serve LLM's own P/D app (`ray.serve.llm.build_pd_openai_app`) on a running Ray.

Run by the harness with the peer venv's interpreter (it imports `ray.serve.llm`):

    python -m pdserve.bench.peers.ray_llm_app SPEC_JSON

SPEC_JSON: {"gcs_port", "http_port", "model_id", "model_path", "prefill": {"engine_kwargs",
"env"}, "decode": {...}}. 1 prefill + 1 decode replica with the CPU-only placement that works
on this machine: one `{"CPU": 1}` bundle per engine, `num_cpus: 0` on the replica actors and
the ingress. Returns (exit 0) once the application is RUNNING; exit 1 with the reason if not.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

APP_NAME = "peers"
DEPLOY_TIMEOUT_S = 600.0
# LLMConfig sets these itself (model_loading_config) or from log_engine_metrics.
_NOT_ENGINE_KWARGS = ("model", "served_model_name", "disable_log_stats")


def llm_config(spec: dict[str, Any], role: str) -> Any:
    """The `LLMConfig` of one role, from the harness's spec."""
    from ray.serve.llm import LLMConfig

    role_spec = spec[role]
    kwargs = {k: v for k, v in role_spec["engine_kwargs"].items() if k not in _NOT_ENGINE_KWARGS}
    return LLMConfig(
        model_loading_config={"model_id": spec["model_id"], "model_source": spec["model_path"]},
        engine_kwargs=kwargs,
        placement_group_config={"bundles": [{"CPU": 1}]},
        deployment_config={"num_replicas": 1, "ray_actor_options": {"num_cpus": 0}},
        runtime_env={"env_vars": {**role_spec["env"], "HF_HUB_OFFLINE": "1"}},
    )


def deploy(spec: dict[str, Any]) -> None:
    """Start Serve's HTTP proxy on the spec's port and run the P/D app until RUNNING."""
    import ray
    from ray import serve
    from ray.serve.llm import build_pd_openai_app

    address = f"127.0.0.1:{spec['gcs_port']}"
    ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": spec["http_port"]})
    app = build_pd_openai_app(
        {
            "prefill_config": llm_config(spec, "prefill"),
            "decode_config": llm_config(spec, "decode"),
            "ingress_deployment_config": {
                "num_replicas": 1,
                "ray_actor_options": {"num_cpus": 0},
            },
        }
    )
    serve.run(app, name=APP_NAME, route_prefix="/", blocking=False)
    deadline = time.monotonic() + DEPLOY_TIMEOUT_S
    while time.monotonic() < deadline:
        status = serve.status().applications.get(APP_NAME)
        state = str(getattr(status.status, "value", status.status)) if status else "MISSING"
        if state == "RUNNING":
            return
        if state in ("DEPLOY_FAILED", "UNHEALTHY"):
            raise RuntimeError(f"Ray Serve LLM app {state}: {status.message if status else ''}")
        time.sleep(2)
    raise RuntimeError(f"Ray Serve LLM app not RUNNING after {DEPLOY_TIMEOUT_S:.0f} s")


def main() -> int:
    """Entry point; the spec is argv[1]."""
    try:
        deploy(json.loads(sys.argv[1]))
    except Exception as exc:
        print(f"deploy failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
