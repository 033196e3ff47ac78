# Two commands for a fresh machine: `make demo` and `make test`. Both install what they need
# (virtualenv, Python packages; Maven jars are fetched and cached on first use).
SHELL := /bin/bash
VENV := .venv
STAMP := $(VENV)/.keyshift-installed
KS := $(VENV)/bin/keyshift
PYTEST_ARGS ?=
# Much of a serial run is waiting (polls, timeouts, restarts after a kill), so the suite runs
# in parallel workers that overlap the waits, each with its own broker and Spark session
# (tests/platform_fixtures.py); more workers than 3 on 2 cores only add idle JVMs and
# contention. TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 3

.PHONY: venv demo test test-fast bench airflow clean-runtime

$(STAMP): pyproject.toml constraints.txt scripts/bootstrap
	@scripts/bootstrap

venv: $(STAMP)

## Run the demo: local Kafka broker, local Spark, Delta warehouse, MLflow, generator.
demo: $(STAMP)
	$(KS) demo $(DEMO_ARGS)

## Run the whole test suite, integration tests included (this is what CI runs).
test: $(STAMP)
	$(VENV)/bin/python -m pytest -n $(TEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

## Only the pure-core tests (milliseconds to seconds).
test-fast: $(STAMP)
	$(VENV)/bin/python -m pytest -m "not integration and not slow" $(PYTEST_ARGS)

## List the benchmarks, or run one: make bench BENCH=stream BENCH_ARGS=--quick
bench: $(STAMP)
	$(VENV)/bin/python -m bench $(BENCH) $(BENCH_ARGS)

airflow: $(STAMP)
	$(KS) airflow standalone

clean-runtime:
	rm -rf .keyshift
