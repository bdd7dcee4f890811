#!/usr/bin/env bash
# The prepared GPU check (written for one H200, no network, no model weights): seven steps, most important
# first, each under its own `timeout`, under 10 minutes in all (the benches print each row as it is
# measured, so a step cut short keeps what it had); every step's output goes to
# $OUT/<step>.log ($OUT if set, else ./gpu_out) and a summary of exit codes to $OUT/summary.txt.
# Nothing is installed from the network, and a failing step does not stop the ones after it.
#
#   bash bench/gpu_check.sh            # all steps
#   bash bench/gpu_check.sh logprob_bench update_bench   # only these
#
# Through the device tool, with the wheels of liger-kernel 0.8.5, torchao 0.18.0 and transformers
# 5.19.0 (our pin; the image has 5.17), carried in .whl/ (kept out of
# git through .git/info/exclude). For the GPU machine's Python 3.12 on x86-64:
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
#     -d .whl liger-kernel==0.8.5 torchao==0.18.0 transformers==5.19.0
# transformers 5.19 needs tokenizers >= 0.23.1 and huggingface-hub >= 1.31 at import; if the image's are
# older, the first line of the output says so and every step fails at once: rerun without the
# transformers wheel (`rm .whl/transformers-*` before the call) to use the image's 5.17.
# The image's torch is 2.11 (no vLLM): its varlen attention has no enable_gqa, which attention.py
# handles; the CPU tests of the engine and the update pass under torch 2.11 too.
#   run(carry=[".whl"], timeout_s=600, command="python3 -m pip install -q --no-index --no-deps --no-compile
#       --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site && bash bench/gpu_check.sh")
# Steps: the kernel tests; bench/logprob_bench.py; bench/generate_bench.py; bench/update_bench.py; the
# memory plan against torch.cuda.max_memory_allocated of the real update of a Qwen3-4B shape (fp32
# masters, fp32 moments, 32k tokens; bench/memory_bench.py --cuda); the CUDA-only tests of the engine
# and the update; a 3-step spade.py run on a random Qwen3-1.7B-shaped model with the in-process engine
# (its run directory, with a checkpoint of 12 bytes a parameter, stays in /tmp; its metrics.jsonl is
# copied to $OUT). The step limits add up to 600 s. With ~2 minutes of start-up that leaves ~3 minutes
# of the 15 for a rerun of the steps that failed (`bash bench/gpu_check.sh NAME...`).
# What a lent device cannot check: vLLM (no wheel there, no network), so neither the engine's start with
# the plan's sizes, its sleep and wake-up beside the trainer nor the weight push; several GPUs (one is
# lent), so neither NCCL between ranks, tensor parallelism nor the plan's rows of 8; real weights.
set -u

PY=${PYTHON:-python3}
OUT_DIR=${OUT:-./gpu_out}
mkdir -p "$OUT_DIR" && OUT_DIR=$(cd "$OUT_DIR" && pwd) || exit 1   # absolute: we change directory below
cd "$(dirname "$0")/.." || exit 1   # the repository root
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
SUMMARY="$OUT_DIR/summary.txt"
: > "$SUMMARY"
RUN_DIR=/tmp/gpu_check_run
ONLY=" $* "

step() {  # step NAME SECONDS COMMAND...: run it under timeout, log to $OUT_DIR/NAME.log, record its exit code
  local name=$1 seconds=$2
  shift 2
  [ "$ONLY" = "  " ] || [[ "$ONLY" == *" $name "* ]] || return 0
  local start=$SECONDS
  echo "=== $name (timeout ${seconds}s): $*" | tee -a "$SUMMARY"
  timeout --kill-after=10 "$seconds" "$@" > "$OUT_DIR/$name.log" 2>&1
  local rc=$?
  echo "=== $name: exit $rc after $((SECONDS - start))s$([ "$rc" = 124 ] && echo ' (timed out)')" | tee -a "$SUMMARY"
  tail -n 30 "$OUT_DIR/$name.log"
}

{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  "$PY" -c "import torch, transformers, triton; print('torch', torch.__version__, 'transformers',
transformers.__version__, 'triton', triton.__version__)"
  "$PY" -m pip list 2>/dev/null | grep -iE "^(liger[-_]kernel|torchao|transformers|tokenizers|huggingface[-_]hub) "
  date -u; } 2>&1 | tee -a "$SUMMARY"

PYTEST=("$PY" -m pytest -q -p no:cacheprovider -o addopts=)
step kernel_tests 60 "${PYTEST[@]}" -x tests/test_fused.py
step logprob_bench 80 "$PY" bench/logprob_bench.py
step generate_bench 70 "$PY" bench/generate_bench.py
step update_bench 180 "$PY" bench/update_bench.py --iters 1
step memory_plan 60 "$PY" bench/memory_bench.py --cuda --models random-qwen3-4b
step cuda_tests 80 "${PYTEST[@]}" tests/test_engine.py tests/test_grpo.py -k "cuda or fused_loss_equals"
rm -rf "$RUN_DIR"
step spade_3_steps 70 "$PY" spade.py --model random-qwen3-1.7b --steps 3 --engine hf \
  --num-envs 4 --plays-per-env 4 --max-new-tokens 64 --save-every 3 --out "$RUN_DIR/gpu_check"
[ -f "$RUN_DIR/gpu_check/metrics.jsonl" ] && cp "$RUN_DIR/gpu_check/metrics.jsonl" "$OUT_DIR/"
# -- the engine-trainer log-prob gap of each step of that run (infra/sync.py; a bf16 run stops above 0.25)
[ -f "$OUT_DIR/metrics.jsonl" ] && "$PY" -c 'import json, sys
for m in map(json.loads, open(sys.argv[1])): print("sync/logprob_gap at step", m["step"], m.get("sync/logprob_gap"))' \
  "$OUT_DIR/metrics.jsonl" 2>&1 | tee -a "$SUMMARY"
# --

echo "=== summary (exit codes; 124 = timed out)"
grep '^=== .*: exit' "$SUMMARY"
