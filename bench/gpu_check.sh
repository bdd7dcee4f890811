#!/usr/bin/env bash
# The prepared GPU check (written for one H200, no network, no model weights): six steps in order, each
# under its own `timeout`, about 9 minutes at most in all; every step's output goes to $OUT/<step>.log
# ($OUT if set, else ./gpu_out) and a summary of exit codes to $OUT/summary.txt. Nothing is installed
# from the network, and a failing step does not stop the ones after it.
#
#   bash bench/gpu_check.sh
#
# Through the device tool, with bitsandbytes' and liger-kernel's wheels downloaded into .whl/ (see the
# device README for the `pip download` line) and carried:
#   run(carry=[".whl"], timeout_s=600, command="python3 -m pip install -q --no-index --no-deps --no-compile
#       --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site && bash bench/gpu_check.sh")
# Steps: the CUDA tests; bench/logprob_bench.py; bench/generate_bench.py; bench/update_bench.py; a 3-step
# spade.py run on a random Qwen3-1.7B-shaped model with the in-process engine (its run directory, with a
# 3.4 GB checkpoint, stays in /tmp; its small files are copied to $OUT/run); eval/gpu_check.py.
set -u

PY=${PYTHON:-python3}
OUT_DIR=${OUT:-./gpu_out}
mkdir -p "$OUT_DIR" && OUT_DIR=$(cd "$OUT_DIR" && pwd) || exit 1   # absolute: we change directory below
cd "$(dirname "$0")/.." || exit 1   # the repository root
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
SUMMARY="$OUT_DIR/summary.txt"
: > "$SUMMARY"
RUN_DIR=/tmp/gpu_check_run

step() {  # step NAME SECONDS COMMAND...: run it under timeout, log to $OUT_DIR/NAME.log, record its exit code
  local name=$1 seconds=$2
  shift 2
  local start=$SECONDS
  echo "=== $name (timeout ${seconds}s): $*" | tee -a "$SUMMARY"
  timeout --kill-after=10 "$seconds" "$@" > "$OUT_DIR/$name.log" 2>&1
  local rc=$?
  echo "=== $name: exit $rc after $((SECONDS - start))s$([ "$rc" = 124 ] && echo ' (timed out)')" | tee -a "$SUMMARY"
  tail -n 25 "$OUT_DIR/$name.log"
}

{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  "$PY" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
  date -u; } 2>&1 | tee -a "$SUMMARY"

step cuda_tests 75 "$PY" -m pytest -q -p no:cacheprovider tests -k cuda
step logprob_bench 80 "$PY" bench/logprob_bench.py
step generate_bench 75 "$PY" bench/generate_bench.py
step update_bench 150 "$PY" bench/update_bench.py
rm -rf "$RUN_DIR"
step spade_3_steps 90 "$PY" spade.py --model random-qwen3-1.7b --preset embedded --steps 3 --engine hf \
  --num-envs 4 --plays-per-env 4 --max-new-tokens 64 --designer-max-tokens 128 --micro-token-budget 16384 \
  --out "$RUN_DIR" --run gpu_check
mkdir -p "$OUT_DIR/run"
(cd "$RUN_DIR" 2>/dev/null && find . -type f -size -5M -exec cp --parents -t "$OUT_DIR/run" {} +)
step eval_gpu_check 70 "$PY" -m eval.gpu_check --json "$OUT_DIR/eval_timings.json"

echo "=== summary (exit codes; 124 = timed out)"
grep '^=== .*: exit' "$SUMMARY"
