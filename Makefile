# The two commands in the README are `make example` and `make test`; both set up first.
VENV ?= .venv
PYTHON := $(VENV)/bin/python

.PHONY: setup lint format test example

setup:
	DET_VENV=$(VENV) bash scripts/setup.sh

lint: setup
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .

format: setup
	$(PYTHON) -m ruff check --fix .
	$(PYTHON) -m ruff format .

test: lint
	$(PYTHON) -m pytest

example: setup
	$(VENV)/bin/horovodrun -np 2 -H localhost:2 --gloo $(PYTHON) examples/ctr_binary/train.py
