#!/usr/bin/env bash
# mypy (strict) on the pure and serving core. The top-level folders map into `pdserve.*` only
# through the editable install, which mypy cannot follow, so mirror that layout with symlinks.
set -euo pipefail
venv=${1:-.venv}
tree=.mypy_tree
rm -rf "$tree" && mkdir -p "$tree/pdserve"
for f in pdserve/*.py; do ln -s "../../$f" "$tree/pdserve/$(basename "$f")"; done
ln -s ../../pdserve/engine "$tree/pdserve/engine"
ln -s ../../pdserve/autoscaling "$tree/pdserve/autoscaling"
ln -s ../../pdserve/sim "$tree/pdserve/sim"
ln -s ../../pdserve/context "$tree/pdserve/context"
ln -s ../../pdserve/report "$tree/pdserve/report"
for pkg in router prefill_pool decode_pool kv_transfer deploy bench; do
  ln -s "../../$pkg" "$tree/pdserve/$pkg"
done
# The pure core (config, policy, cost model) and the serving core: router, engine host, both
# pools, KV transfer (without the fabric benchmark) and the Ray Serve app builder. vLLM, Ray
# and torch are huge and barely typed: mypy treats them as Any (pyproject [[tool.mypy.overrides]]).
MYPYPATH="$tree" "$venv/bin/mypy" --explicit-package-bases \
  -m pdserve.config \
  -m pdserve.pool_config \
  -m pdserve.router_config \
  -m pdserve.tenant_config \
  -m pdserve.names \
  -m pdserve.itl_budget \
  -m pdserve.messages \
  -m pdserve.model_source \
  -m pdserve.node \
  -m pdserve.demo_presets \
  -m pdserve.demo_model \
  -m pdserve.ray_node \
  -m pdserve.cluster_procs \
  -m pdserve.serve_env \
  -m pdserve.local_cluster \
  -m pdserve.cluster_cli \
  -m pdserve.tenants_cli \
  -p pdserve.autoscaling \
  -p pdserve.router \
  -p pdserve.engine \
  -p pdserve.prefill_pool \
  -p pdserve.decode_pool \
  -m pdserve.kv_transfer.params \
  -m pdserve.kv_transfer.connector_config \
  -m pdserve.kv_transfer.ports \
  -m pdserve.kv_transfer.vllm_plugin \
  -p pdserve.deploy \
  -p pdserve.top \
  -p pdserve.profiling \
  -p pdserve.sim \
  -p pdserve.context \
  -p pdserve.report \
  -p pdserve.bench.gpu_check
