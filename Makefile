# Sluice: `make quickstart` (install + the whole path on embedded defaults), `make test` (the suite).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install quickstart test test-deps bench bench-smoke clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[test,dev]'
	@echo "archiving Spark's classes for faster JVM starts (about a minute; log: $(VENV)/spark-archive.log)"
	@$(VENV)/bin/sluice spark-archive > $(VENV)/spark-archive.log 2>&1 || \
		echo "no class archive (see $(VENV)/spark-archive.log): Spark starts without it, only slower"
	touch $(STAMP)

install: $(STAMP)  ## a .venv with Sluice, Spark, the dev Kafka broker and the test tools

quickstart: install  ## dev broker + sample data + example spec + Druid SQL; ARGS=--exit to stop after printing
	$(VENV)/bin/sluice quickstart $(ARGS)

test-deps:  ## what the tests start besides Python: Java 17 for Spark, Debian's PostgreSQL server binaries
	@command -v java >/dev/null || { echo "Java 17+ is required for Spark"; exit 1; }
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; }

test: install test-deps  ## the whole suite: unit tests, then real Kafka/Spark/SQLite/PostgreSQL/HTTP tests
	$(PY) -m pytest -q -p no:cacheprovider --durations=40 $(PYTEST_ARGS)

bench: install  ## ingestion, freshness, query latency, task memory and CPU per stage side by side, batch and stream jobs too (about an hour); writes benchmarks/results.json
	$(PY) benchmarks/run_all.py $(ARGS)

bench-smoke: install  ## every benchmark at tiny sizes, to prove the scripts work; writes benchmarks/results-smoke.json
	$(PY) benchmarks/run_all.py --smoke $(ARGS)

clean:
	rm -rf var .pytest_cache
