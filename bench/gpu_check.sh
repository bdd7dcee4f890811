#!/usr/bin/env bash
# The prepared GPU check (written for one H200, no network, no model weights): six steps, most important
# first, each under its own `timeout`, under 10 minutes in all (the benches print each row as it is
# measured, so a step cut short keeps what it had); every step's output goes to
# $OUT/<step>.log ($OUT if set, else ./gpu_out) and a summary of exit codes to $OUT/summary.txt.
# Nothing is installed from the network, and a failing step does not stop the ones after it.
#
#   bash bench/gpu_check.sh            # all steps
#   bash bench/gpu_check.sh kernel_tests memory_plan   # only these
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
# Steps, most important first, each with its budget in STEPS below (the script prints them and their
# sum, and refuses to start where they add up to more than 600 s): the driver (CUDA 13 needs >= 580);
# the kernel tests; the CUDA tests of the update; one vLLM engine (eager, no graph capture) through a
# step's sleep -> push -> wake -> generate against the HF engine (tests/test_engine.py; skipped in one
# sentence where vLLM is not installed); the memory plan's phases (update, what the trainer keeps,
# resume, checkpoint) against torch.cuda.max_memory_allocated of each, on a Qwen3-4B shape (fp32 masters,
# fp32 moments, 32k tokens; bench/memory_bench.py --cuda); a 3-step spade.py run on a random
# Qwen3-1.7B-shaped model with the in-process engine (its run directory, with a checkpoint of 12 bytes a
# parameter, stays in /tmp; its metrics.jsonl is copied to $OUT). At the end, one table: each step's
# budget, time and exit code. With ~2 minutes of start-up that leaves time of the 15 for a rerun of the
# steps that failed (`bash bench/gpu_check.sh NAME...`).
#   bash bench/gpu_check.sh --budget   # the steps' budgets and their sum, without a GPU
# What a lent device cannot check: vLLM (the image has none, and its wheels with torch 2.14's are more than
# a call carries; the step says so in one sentence); several GPUs (one is lent), so neither NCCL between
# ranks, tensor parallelism nor the plan's rows of 8; real weights.
set -u

DRIVER_MIN=580   # CUDA 13.0's (torch 2.14.0+cu130, vLLM 0.33's kernels); minor-version compatible from there
# name:seconds, in order: the one source of each step's budget
STEPS=(driver:10 kernel_tests:60 cuda_tests:90 vllm_cycle:150 memory_plan:120 spade_3_steps:90)

budget() {  # budget NAME: its seconds in STEPS
  local s
  for s in "${STEPS[@]}"; do [ "${s%%:*}" = "$1" ] && echo "${s#*:}" && return; done
}

TOTAL=0 LINE=""
for s in "${STEPS[@]}"; do TOTAL=$((TOTAL + ${s#*:})) LINE="$LINE${LINE:+ + }${s%%:*} ${s#*:}s"; done
echo "budget: $LINE = ${TOTAL}s of 600s"
if [ "$TOTAL" -gt 600 ]; then echo "gpu_check.sh: the steps' budgets add up to ${TOTAL}s, over 600"; exit 1; fi
[ "$*" = "--budget" ] && exit 0

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

step() {  # step NAME COMMAND...: run it under its budget's timeout, log to $OUT_DIR/NAME.log, record its exit code
  local name=$1 seconds
  seconds=$(budget "$1")
  shift
  [ "$ONLY" = "  " ] || [[ "$ONLY" == *" $name "* ]] || return 0
  local start=$SECONDS
  echo "=== $name (budget ${seconds}s): $*"
  timeout --kill-after=10 "$seconds" "$@" > "$OUT_DIR/$name.log" 2>&1
  local rc=$?
  echo "| $name | $seconds | $((SECONDS - start)) | $rc$([ "$rc" = 124 ] && echo ' (timed out)') |" >> "$SUMMARY"
  tail -n 30 "$OUT_DIR/$name.log"
}

skip() {  # skip NAME SENTENCE
  [ "$ONLY" = "  " ] || [[ "$ONLY" == *" $1 "* ]] || return 0
  echo "| $1 | $(budget "$1") | 0 | skipped: $2 |" >> "$SUMMARY"
}

# The driver first: with one older than CUDA 13's, nothing below can run.
DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)
if ! [[ "${DRIVER%%.*}" =~ ^[0-9]+$ ]] || [ "${DRIVER%%.*}" -lt "$DRIVER_MIN" ]; then
  echo "gpu_check.sh: NVIDIA driver ${DRIVER:-not found (no nvidia-smi)}; torch 2.14.0+cu130 and vLLM 0.33 need CUDA 13, which needs driver $DRIVER_MIN or newer"
  exit 1
fi
echo "| driver | $(budget driver) | 0 | 0 ($DRIVER) |" >> "$SUMMARY"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  "$PY" -c "import torch, transformers, triton; print('torch', torch.__version__, 'transformers',
transformers.__version__, 'triton', triton.__version__)"
  "$PY" -m pip list 2>/dev/null | grep -iE "^(liger[-_]kernel|torchao|transformers|tokenizers|huggingface[-_]hub|vllm) "
  date -u; } 2>&1

PYTEST=("$PY" -m pytest -q -p no:cacheprovider -o addopts=)
step kernel_tests "${PYTEST[@]}" -x tests/test_fused.py
step cuda_tests "${PYTEST[@]}" tests/test_grpo.py tests/test_engine.py -k "(cuda or fused_loss_equals) and not vllm"
if "$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"; then
  step vllm_cycle "${PYTEST[@]}" tests/test_engine.py -k test_vllm_sleep_push_wake_cycle
else
  skip vllm_cycle "vLLM is not installed here (requirements-gpu.txt installs it)"
fi
step memory_plan "$PY" bench/memory_bench.py --cuda --models random-qwen3-4b
rm -rf "$RUN_DIR"
step spade_3_steps "$PY" spade.py --model random-qwen3-1.7b --steps 3 --engine hf \
  --num-envs 4 --plays-per-env 4 --max-new-tokens 64 --save-every 3 --out "$RUN_DIR/gpu_check"
[ -f "$RUN_DIR/gpu_check/metrics.jsonl" ] && cp "$RUN_DIR/gpu_check/metrics.jsonl" "$OUT_DIR/"
# -- the engine-trainer log-prob gap of each step of that run (harness/sync.py; a bf16 run stops above 0.25)
[ -f "$OUT_DIR/metrics.jsonl" ] && "$PY" -c 'import json, sys
for m in map(json.loads, open(sys.argv[1])): print("sync/logprob_gap at step", m["step"], m.get("sync/logprob_gap"))' \
  "$OUT_DIR/metrics.jsonl" 2>&1 | tee -a "$SUMMARY"
# --

echo "| step | budget s | took s | exit (124: timed out) |"
echo "|---|---|---|---|"
cat "$SUMMARY"
