# Sluice: the two set-up commands are `make quickstart` and `make test`; both install what is missing.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.sluice-installed

.PHONY: setup kafka s3 spark opensearch quickstart test unit integration bench lint clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	bash deploy/bootstrap.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,jdbc,s3,spark]'
	touch $(STAMP)

kafka: setup
	$(PY) -m deploy.kafka_stack fetch

s3: setup
	$(PY) -m deploy.s3_server fetch

spark: setup
	$(PY) -m deploy.spark fetch

opensearch: setup
	$(PY) -m deploy.opensearch fetch

quickstart: setup kafka
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" bash deploy/quickstart/run.sh

test: setup kafka s3 opensearch spark
	$(PY) -m pytest

unit: setup
	$(PY) -m pytest tests/unit

integration: setup kafka s3 opensearch spark
	$(PY) -m pytest tests/integration

bench: setup kafka
	$(PY) -m benchmarks.run

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy connectors converters offsets worker rest plugins deploy

clean:
	rm -rf $(VENV) .sluice .pytest_cache
