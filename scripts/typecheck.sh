#!/usr/bin/env bash
# mypy on the pure core. The top-level folders map into `pdserve.*` only through the editable
# install, which mypy cannot follow, so mirror that layout with symlinks first.
set -euo pipefail
venv=${1:-.venv}
tree=.mypy_tree
rm -rf "$tree" && mkdir -p "$tree/pdserve"
for f in pdserve/*.py; do ln -s "../../$f" "$tree/pdserve/$(basename "$f")"; done
ln -s ../../pdserve/engine "$tree/pdserve/engine"
for pkg in router prefill_pool decode_pool kv_transfer deploy bench; do
  ln -s "../../$pkg" "$tree/pdserve/$pkg"
done
MYPYPATH="$tree" "$venv/bin/mypy" --explicit-package-bases \
  -m pdserve.config \
  -p pdserve.router.policy \
  -p pdserve.top \
  -p pdserve.profiling \
  -m pdserve.router.timeline \
  -m pdserve.engine.coalesce \
  -m pdserve.router.block_hashes \
  -m pdserve.router.kv_size \
  -m pdserve.router.metric_catalog \
  -m pdserve.router.openai_models \
  -m pdserve.kv_transfer.params \
  -m pdserve.kv_transfer.connector_config
