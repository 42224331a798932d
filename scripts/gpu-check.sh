#!/usr/bin/env bash
# pdserve GPU check: one end-to-end run of pdserve on ONE NVIDIA GPU, offline, in < 8 minutes.
#
#   scripts/gpu-check.sh [--out DIR] [--platform cuda|cpu] [--model-dir DIR] [--budget-s N]
#                        [--num-requests N] [--compile]
#
# Steps (each under a timeout; all of them within --budget-s, teardown after):
#   env        GPU, driver and library versions (env.json); stops here without a GPU
#   model      the gpu-check demo model (~415 MB bf16), created offline (model.json)
#   config     run config from deploy/gpu-check.yaml with that model and private ports
#   kv-check   `pdserve kv-check --device cuda`: NIXL bandwidth/latency, TCP fallback
#   digest     the KV integrity digest's cost on the device against a plain copy (digest.json;
#              python -m pdserve.kv_transfer.digest_bench, docs/kv-integrity.md)
#   reference  an aggregated vLLM server of the same model (started beside the cluster)
#   up         `pdserve up --detach`: 1 prefill + 1 decode replica sharing the GPU
#   identity   greedy outputs of pdserve vs the aggregated server, token by token
#   bench      `pdserve bench --workload mixed`: TTFT, ITL, throughput
#   metrics    the router's /metrics (KV transfer histograms)
# then `pdserve down`, the reference server killed (always, also on Ctrl-C or failure), and
# one summary table. Raw files (JSON, logs) land in --out (default bench/out/gpu-check-TIME).
# Exit 0 only when every step succeeded and the identity check passed.
#
# --platform cpu is a dry run of the same plumbing on a machine without a GPU: the tiny demo
# model, deploy/local.yaml, smaller loads, a longer budget (CPU engines start slowly).
# --compile lets vLLM compile and capture CUDA graphs (closer to production speed; start-up
# takes minutes, so raise --budget-s). Env: PYTHON (default .venv/bin/python, else python3).
set -uo pipefail

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 2

PLATFORM=cuda OUT_DIR="" MODEL_DIR="" BUDGET_S="" NUM_REQUESTS="" EAGER_FLAG=""
while (($#)); do
  case $1 in
    --platform) PLATFORM=${2:?}; shift 2 ;;
    --out) OUT_DIR=${2:?}; shift 2 ;;
    --model-dir) MODEL_DIR=${2:?}; shift 2 ;;
    --budget-s) BUDGET_S=${2:?}; shift 2 ;;
    --num-requests) NUM_REQUESTS=${2:?}; shift 2 ;;
    --compile) EAGER_FLAG=--no-eager; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "unknown option: $1" >&2; usage >&2; exit 2 ;;
  esac
done

if [[ -n ${PYTHON:-} ]]; then PY=$PYTHON
elif [[ -x $ROOT/.venv/bin/python ]]; then PY=$ROOT/.venv/bin/python
else PY=$(command -v python3); fi
PDSERVE=$(dirname "$PY")/pdserve
[[ -x $PDSERVE ]] || PDSERVE=$(command -v pdserve) || { echo "pdserve CLI not found" >&2; exit 2; }
CHECK=("$PY" -m pdserve.bench.gpu_check)

case $PLATFORM in
  cuda)
    TEMPLATE=deploy/gpu-check.yaml SIZE=gpu-check
    MODEL_DIR=${MODEL_DIR:-$HOME/.cache/pdserve/gpu-check-model}
    BUDGET_S=${BUDGET_S:-360}  # + teardown (<= 85 s) + kill (<= 15 s) + summary: < 8 min
    KV_SIZES=4K,64K,1M,16M,64M,256M
    BENCH=(--num-requests "${NUM_REQUESTS:-64}" --concurrency 8 --short-tokens 50
      --long-tokens 1500 --output-tokens 64)
    ;;
  cpu)
    TEMPLATE=deploy/local.yaml SIZE=tiny
    MODEL_DIR=${MODEL_DIR:-$HOME/.cache/pdserve/demo-model}
    BUDGET_S=${BUDGET_S:-1200}
    KV_SIZES=4K,64K,1M,16M
    BENCH=(--num-requests "${NUM_REQUESTS:-16}" --concurrency 4 --short-tokens 50
      --long-tokens 500 --output-tokens 16)
    ;;
  *) echo "--platform must be cuda or cpu" >&2; exit 2 ;;
esac

OUT_DIR=${OUT_DIR:-bench/out/gpu-check-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT_DIR" || exit 2
OUT_DIR=$(cd "$OUT_DIR" && pwd)
STEPS=$OUT_DIR/steps.jsonl
: >"$STEPS"

# A private cluster: its own Ray port, metrics port and state (a default `pdserve up` on this
# machine is left alone); nothing is fetched from the Hugging Face hub.
export PDSERVE_RAY_PORT=${PDSERVE_RAY_PORT:-6396}
export PDSERVE_RAY_METRICS_PORT=${PDSERVE_RAY_METRICS_PORT:-8396}
export PDSERVE_STATE_DIR=$HOME/.cache/pdserve/gpu-check-state
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1

START=$(date +%s.%N)
now_s() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now_s)" 'BEGIN { printf "%.1f", b - a }'; }
left_s() { awk -v s="$START" -v b="$BUDGET_S" -v n="$(now_s)" 'BEGIN { printf "%d", s + b - n }'; }
say() { printf '[%5.0f s] %s\n' "$(since "$START")" "$*"; }
record() { # NAME RC ELAPSED_S LIMIT_S
  printf '{"step": "%s", "rc": %d, "elapsed_s": %s, "timeout_s": %s}\n' "$1" "$2" "$3" "$4" >>"$STEPS"
}
skip() { say "$1: skipped ($2)"; record "$1" -1 0 0; }

STEP_PID="" STEP_NAME="" STEP_T0="" REF_PID="" UP_STARTED=0
# run_step NAME CAP_S RESERVE_S CMD...: run CMD (output to NAME.log) under a limit of CAP_S,
# or of the budget left minus RESERVE_S (kept for later steps) if that is less.
run_step() {
  local name=$1 cap=$2 reserve=$3 left limit t rc
  shift 3
  left=$(($(left_s) - reserve))
  limit=$((cap < left ? cap : left))
  if ((limit < 5)); then skip "$name" "no time left in the ${BUDGET_S} s budget"; return 1; fi
  say "$name: running (limit $limit s, log $OUT_DIR/$name.log)"
  t=$(now_s)
  timeout --kill-after=10 "$limit" "$@" >"$OUT_DIR/$name.log" 2>&1 &
  STEP_PID=$! STEP_NAME=$name STEP_T0=$t
  wait "$STEP_PID"
  rc=$?
  STEP_PID="" STEP_NAME=""
  record "$name" "$rc" "$(since "$t")" "$limit"
  if ((rc == 0)); then
    say "$name: ok ($(since "$t") s)"
  else
    say "$name: FAILED (exit $rc$( ((rc == 124 || rc == 137)) && echo ", out of time")); last lines:"
    tail -n 25 "$OUT_DIR/$name.log" | sed 's/^/    /'
  fi
  return "$rc"
}

# Ray's logs of this session (replicas, engines): they vanish with the machine otherwise.
collect_ray_logs() {
  local src=/tmp/ray/session_latest/logs
  [[ -d $src ]] || return 0
  mkdir -p "$OUT_DIR/ray-logs"
  find -L "$src" -maxdepth 2 -type f -size +0 -size -5M \( -path "$src/serve/*" \
    -o -name "worker-*.err" -o -name "worker-*.out" -o -name "raylet.out" \) \
    -exec cp {} "$OUT_DIR/ray-logs/" \; 2>/dev/null
}

cleanup() {
  local rc=$? t down_rc
  trap - EXIT INT TERM
  if [[ -n $STEP_PID ]]; then  # interrupted mid-step: stop it, record it as interrupted
    kill -TERM "$STEP_PID" 2>/dev/null && wait "$STEP_PID" 2>/dev/null
    record "$STEP_NAME" 130 "$(since "$STEP_T0")" 0
  fi
  if [[ -n $REF_PID ]]; then
    "${CHECK[@]}" kill-tree "$REF_PID" >>"$OUT_DIR/reference.log" 2>&1
  fi
  if ((UP_STARTED)); then
    collect_ray_logs
    say "down: stopping the cluster"
    t=$(now_s)
    timeout --kill-after=10 75 "$PDSERVE" down >"$OUT_DIR/down.log" 2>&1
    down_rc=$?
    record down "$down_rc" "$(since "$t")" 75
    ((down_rc == 0)) || tail -n 15 "$OUT_DIR/down.log" | sed 's/^/    /'
  fi
  echo
  "${CHECK[@]}" summary --dir "$OUT_DIR"
  local summary_rc=$?
  echo "raw results: $OUT_DIR"
  exit $((rc != 0 ? rc : summary_rc))
}
on_signal() {
  say "interrupted: tearing down"
  exit 130
}
trap cleanup EXIT
trap on_signal INT TERM

say "pdserve GPU check: platform $PLATFORM, budget ${BUDGET_S} s, results in $OUT_DIR"
if [[ -f $PDSERVE_STATE_DIR/state.json ]]; then  # an earlier check run did not finish
  say "stopping the cluster an earlier check run left behind"
  timeout --kill-after=10 75 "$PDSERVE" down >"$OUT_DIR/preclean.log" 2>&1
fi

run_step env 60 0 "${CHECK[@]}" env --platform "$PLATFORM" --json "$OUT_DIR/env.json" || exit 1
run_step model 150 0 "${CHECK[@]}" model --out "$MODEL_DIR" --size "$SIZE" \
  --json "$OUT_DIR/model.json" || exit 1
run_step config 60 0 "${CHECK[@]}" config --template "$TEMPLATE" --model-dir "$MODEL_DIR" \
  --out "$OUT_DIR/config.yaml" --shell-out "$OUT_DIR/config.env" ${EAGER_FLAG:+"$EAGER_FLAG"} \
  || exit 1
# shellcheck source=/dev/null
source "$OUT_DIR/config.env"  # ROUTER_URL REF_URL MODEL_NAME REF_ARGS REF_ENV

# The fabric first, on an idle GPU: two NIXL agents on this node.
run_step kv-check 120 200 "$PDSERVE" kv-check --device "$PLATFORM" --sizes "$KV_SIZES" \
  --json "$OUT_DIR/kv_check.json"
run_step digest 60 200 "$PY" -m pdserve.kv_transfer.digest_bench --device "$PLATFORM" \
  --mib 256 --json "$OUT_DIR/digest.json"

# The reference server starts while the cluster does (both take most of their time loading).
say "reference: starting an aggregated vLLM server at $REF_URL (log $OUT_DIR/reference.log)"
env "${REF_ENV[@]}" "$PY" -m vllm.entrypoints.openai.api_server "${REF_ARGS[@]}" \
  >"$OUT_DIR/reference.log" 2>&1 &
REF_PID=$!
record reference-start 0 0 0

UP_STARTED=1
CLUSTER_UP=0
UP_LIMIT=$(($(left_s) - 90 < 300 ? $(left_s) - 90 : 300))
if run_step up 300 90 "$PDSERVE" up --config "$OUT_DIR/config.yaml" --detach \
  --timeout-s "$((UP_LIMIT > 30 ? UP_LIMIT - 15 : 15))"; then
  CLUSTER_UP=1
fi

REF_UP=0
if run_step reference-ready 240 60 "${CHECK[@]}" wait-ready --url "$REF_URL/health" \
  --pid "$REF_PID" --timeout-s 600; then
  REF_UP=1
else
  echo "    reference.log:" && tail -n 25 "$OUT_DIR/reference.log" | sed 's/^/    /'
fi

if ((CLUSTER_UP && REF_UP)); then
  run_step identity 150 40 "${CHECK[@]}" identity --pdserve "$ROUTER_URL" \
    --reference "$REF_URL" --model "$MODEL_NAME" --json "$OUT_DIR/identity.json"
else
  skip identity "the cluster or the reference server is not up"
fi

# Free the GPU share of the reference before measuring.
run_step reference-stop 40 0 "${CHECK[@]}" kill-tree "$REF_PID" && REF_PID=""

if ((CLUSTER_UP)); then
  run_step bench 150 10 "$PDSERVE" bench --url "$ROUTER_URL" --model "$MODEL_NAME" \
    --workload mixed "${BENCH[@]}" --json "$OUT_DIR/bench.json"
  run_step metrics 20 0 "${CHECK[@]}" metrics --url "$ROUTER_URL" --out "$OUT_DIR/metrics.txt"
else
  skip bench "the cluster is not up"
  skip metrics "the cluster is not up"
fi
exit 0
