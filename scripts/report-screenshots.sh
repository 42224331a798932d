#!/usr/bin/env bash
# Regenerate the report screenshots of bench/README.md ("Reports") from real short runs on this
# machine: one per report kind. Usage: scripts/report-screenshots.sh [OUT_DIR]
# (make report-screenshots). About 8 minutes on a 2-core CPU machine: it starts the 2P1D demo
# cluster for the compare and fault runs and the sim profile, the 1P1D one for the overload
# run, then lets `bench --deployments` start the aggregated and 1P1D clusters itself. The
# reports stay in OUT_DIR (default bench/out/reports, git-ignored); only the PNGs go into
# bench/img/.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/out/reports}
img=bench/img
pd=.venv/bin/pdserve
mkdir -p "$out" "$img"
trap '$pd down >/dev/null 2>&1 || true' EXIT

echo ">> 2P1D cluster: compare, faults, sim profile"
$pd up --detach --config deploy/local-2p1d.yaml
$pd bench --compare round_robin,pdserve --num-requests 120 --report "$out/compare"
$pd bench-faults --faults kill-prefill --report "$out/faults"
$pd profile --config deploy/local-2p1d.yaml --quick --sim-profile "$out/sim-profile.json"
$pd down

echo ">> 1P1D cluster (admission limits tuned): overload at 10x, a 429 storm"
$pd up --detach --config deploy/local.yaml
$pd bench-overload --levels 16,160 --num-requests 320 --report "$out/overload" || true  # exit 1: a check failed; drawn all the same
$pd down

echo ">> aggregated vs 1P1D (the bench starts each), then the simulator's prediction of it"
$pd bench --deployments aggregated=deploy/local-aggregated.yaml,1p1d=deploy/local.yaml \
  --num-requests 120 --json "$out/layouts.json" --report "$out/deployments"
$pd simulate --profile "$out/sim-profile.json" --measured "$out/layouts.json" --runs 1 \
  --report "$out/prediction"

for kind in compare deployments faults overload prediction; do
  $pd report look "$out/$kind" --screenshot "$img/report-$kind.png" --height 1300
done
ls -l "$img"
