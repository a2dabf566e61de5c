# The two commands in the README are `make example` and `make test`; both set up first.
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
# STACK=current sets up and tests the current stack (TensorFlow 2.21, Keras 3, no Horovod) in
# .venv-current; the default is the estimator stack in .venv (see scripts/setup.sh).
# `make test` alone tests both stacks, one after the other; STACK=... tests that one.
# PYTHON picks the estimator stack's interpreter there (3.9 to 3.11); the current stack's is
# CURRENT_PYTHON (default: the first of 3.12, 3.13, 3.11, 3.10 found), or PYTHON with STACK=current.
ifeq ($(origin STACK),undefined)
TEST_STACKS := estimator current
CURRENT_PYTHON ?=
else
TEST_STACKS := $(STACK)
CURRENT_PYTHON ?= $(PYTHON)
endif
STACK ?= estimator
ifeq ($(STACK),current)
VENV ?= .venv-current
# NumPy 2's stubs use Python 3.12 syntax: the current stack is type-checked as Python 3.12.
MYPY_FLAGS ?= --python-version 3.12
else
VENV ?= .venv
endif
# The venv's interpreter. PYTHON (in the environment or on the command line) is left to
# scripts/setup.sh, which builds the venv from the interpreter it names.
VENV_PYTHON := $(VENV)/bin/python

.PHONY: setup lint format test test-stack test-all example

# The tests run on this many pytest processes; most tests start processes of their own.
TEST_WORKERS ?= 2
PYTEST := $(VENV_PYTHON) -m pytest -n $(TEST_WORKERS) --dist loadgroup

setup:
	STACK=$(STACK) DET_VENV=$(VENV) bash scripts/setup.sh
	bash scripts/setup_system.sh

lint: setup
	$(VENV_PYTHON) -m ruff check .
	$(VENV_PYTHON) -m ruff format --check .
	$(VENV_PYTHON) -m mypy $(MYPY_FLAGS) det_estimator

format: setup
	$(VENV_PYTHON) -m ruff check --fix .
	$(VENV_PYTHON) -m ruff format .

# Everything but the few long end-to-end runs marked slow, on each stack (tests that need
# tf.estimator or Horovod skip on the current one, saying so); test-all runs the slow ones
# too. Each lane ends with its slowest tests and its time, to show where the time goes.
# Where both stacks are tested, the runs marked any_stack (the same on both) run in the
# current stack's lane alone.
TEST_MARKS ?= not slow
test:
	@for stack in $(TEST_STACKS); do \
		start=$$(date +%s); \
		if [ $$stack = current ]; then python="PYTHON=$(CURRENT_PYTHON)"; else python=""; fi; \
		marks="$(TEST_MARKS)"; \
		if [ $$stack = estimator ] && [[ " $(TEST_STACKS) " == *" current "* ]]; then marks="$$marks and not any_stack"; fi; \
		$(MAKE) --no-print-directory test-stack STACK=$$stack $$python TEST_MARKS="$$marks"; \
		echo "[test] the $$stack stack: $$(( $$(date +%s) - start )) s, set-up included"; \
	done

test-stack: lint
	$(PYTEST) -m "$(TEST_MARKS)" --durations=20

test-all: lint
	$(PYTEST) --durations=20

example: setup
	mkdir -p runs
	$(VENV)/bin/det-estimator --store runs/store.sqlite experiment create examples/ctr_binary/distributed.yaml examples/ctr_binary
	$(VENV_PYTHON) examples/ctr_binary/score.py --store runs/store.sqlite --experiment latest
