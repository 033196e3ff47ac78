# Two commands for a fresh machine: `make demo` and `make test`. Both install what they need
# (virtualenv, Python packages; Maven jars are fetched and cached on first use).
SHELL := /bin/bash
VENV := .venv
STAMP := $(VENV)/.keyshift-installed
KS := $(VENV)/bin/keyshift
PYTEST_ARGS ?=
# TEST_WORKERS=N runs the suite in N parallel workers (pytest-xdist, work stealing), each with
# its own broker and Spark session (tests/platform_fixtures.py), the slow tests handed out
# first. On this project's 2-core machine the suite is CPU-bound (Spark local[2] and the
# job subprocesses' JVMs fill both cores), so workers only add contention: 3 of them had
# done 93 % after 38 min against 45-50 min for the whole suite in one process (stop 31), and
# 2 of them took over 48 min against 43 min 44 s in one process on the same day (stop 34,
# load average 7-8, the SIGKILL test last). Hence 0 (one process) by default; use N on a
# host with 2N cores or more. What cut the one-process time instead: every test driver JVM
# compiles with C1 alone, with the full code cache (tests/conftest.py), maps the class
# archive built at install (lakehouse/class_sharing.py), and fewer JVM starts per test.
TEST_WORKERS ?= 0

.PHONY: venv demo test test-fast bench airflow clean-runtime

$(STAMP): pyproject.toml constraints.txt scripts/bootstrap
	@scripts/bootstrap

venv: $(STAMP)

## Run the demo: local Kafka broker, local Spark, Delta warehouse, MLflow, generator.
demo: $(STAMP)
	$(KS) demo $(DEMO_ARGS)

## Run the whole test suite, integration tests included (this is what CI runs).
test: $(STAMP)
	$(VENV)/bin/python -m pytest -n $(TEST_WORKERS) --dist worksteal -m "" $(PYTEST_ARGS)

## The fast tier (a bare pytest runs it too): no broker, Spark subprocess or kill; on two
## workers (tests/conftest.py), ~2.5 min here.
test-fast: $(STAMP)
	$(VENV)/bin/python -m pytest -m "not integration and not slow" $(PYTEST_ARGS)

## List the benchmarks, or run one: make bench BENCH=stream BENCH_ARGS=--quick
bench: $(STAMP)
	$(VENV)/bin/python -m bench $(BENCH) $(BENCH_ARGS)

airflow: $(STAMP)
	$(KS) airflow standalone

clean-runtime:
	rm -rf .keyshift
