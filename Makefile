# The two commands of the README: `make demo` and `make test`. Both create .venv when missing.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip

.PHONY: demo demo-deps bytecode test test-fast test-hudi hudi-peer soak lint bench bench-markers bench-scan bench-mor bench-record-index bench-scale bench-longrun bench-hudi-metadata bench-hudi-format system-deps clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# Re-install when the project's metadata changes.
$(VENV)/.installed: pyproject.toml | $(PY)
	$(PIP) install -q -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(PY)
	$(PIP) install -q -e '.[test]'
	touch $@ $(VENV)/.installed

# Our modules' bytecode, compiled once: an editable install leaves them uncompiled, and where
# PYTHONDONTWRITEBYTECODE is set (as on the CI machines) Python never caches what it compiles, so
# every process (each CLI call, daemon, crash point and Spark worker of the tests) compiled every
# module again: a quarter of a second of `indexer run`'s one-second start. Python reads the caches
# whether or not that variable is set; compileall skips what is current.
bytecode: | $(PY)
	@$(PY) -m compileall -q -j 0 timeline metadata_table writer indexer scripts tests

# What the OS must provide, installed with apt when absent (scripts/ensure-system-deps.sh): the
# demo needs a Java runtime alone; the tests also Maven, PostgreSQL's server and Chromium.
demo-deps:
	@bash scripts/ensure-system-deps.sh demo

system-deps:
	@bash scripts/ensure-system-deps.sh test

demo: $(VENV)/.installed demo-deps bytecode
	$(PY) scripts/demo.py

# Apache Hudi 0.15 for the tests that run it (marked `hudi`): its own virtualenv (.venv-hudi, pyspark
# 3.5) and its Spark bundle fetched with Maven into .cache/hudi-jars. The first build downloads about
# 425 MB; later ones return at once, offline. The `hudi` fixture builds it too when it is missing.
hudi-peer: system-deps
	@bash scripts/hudi-peer-env.sh

# Test files run in WORKERS processes (pytest-xdist; 2 by default, one per core of the CI machine):
# a file stays on one worker, so a module's Hudi session and shared tables are made once. Each
# worker starts its own SparkSession and Hudi peer on first use. WORKERS=0 runs in this process.
WORKERS ?= 2
XDIST   := -n $(WORKERS) --dist loadfile

# pytest exits 5 when it collects no test; that is not a failure of the suite. The 30 slowest
# tests are listed at the end, so a run that nears CI's time budget shows where the time went.
test: $(VENV)/.installed-test system-deps hudi-peer bytecode
	@$(PY) -m pytest $(XDIST) --durations=30 $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; exit 0; fi; exit $$rc

# The inner loop: everything but the tests marked slow (a JVM, a cluster, the reliability suites);
# under 4 minutes on 2 cores. `make test` still runs everything, and CI runs `make test`.
test-fast: $(VENV)/.installed-test system-deps bytecode
	@$(PY) -m pytest $(XDIST) -m "not slow" $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; exit 0; fi; exit $$rc

# Only the tests that run Apache Hudi itself.
test-hudi: $(VENV)/.installed-test system-deps hudi-peer bytecode
	$(PY) -m pytest -m hudi $(PYTEST_ARGS)

# The reliability suites at full length: every crash point, 5-minute concurrency runs per backend
# (AIX_SOAK_SECONDS to change), storage faults at 20%. About 22 minutes on 2 cores (16 with
# AIX_SOAK_SECONDS=120). Then the variants `make test` skips (marked `soak`: more kill points of
# real processes, a Spark task that raises, `indexer sync` closing the lag after an outage beside
# Hudi, 16,000 markers): about 8 minutes more.
soak: $(VENV)/.installed-test system-deps hudi-peer bytecode
	AIX_SOAK=1 AIX_FAULT_RATE=$${AIX_FAULT_RATE:-0.2} $(PY) -m pytest tests/reliability -rA $(PYTEST_ARGS)
	AIX_SOAK=1 $(PY) -m pytest -m soak tests --ignore=tests/reliability -rA $(PYTEST_ARGS)

# Benchmarks print ratios measured side by side in one run (this machine is shared and noisy).
bench-markers: $(VENV)/.installed-test bytecode
	$(PY) scripts/bench/markers.py

# Scans through the index against full-scan readers, and a scan's peak memory (also in `make bench`).
bench-scan: $(VENV)/.installed-test bytecode
	$(PY) scripts/bench/scan.py

# A table's long life: a warm writer upserting with default settings (clean and archival on),
# storage, timeline, commit p50/p95 and a fresh read every 500 commits, up to 10,000.
# A table's long life, writer alone and beside `indexer serve`; the plot goes to docs/longrun.svg.
LONGRUN_COMMITS ?= 10000
bench-longrun: $(VENV)/.installed-test bytecode
	mkdir -p bench-results
	$(PY) -m scripts.bench.longrun --commits $(LONGRUN_COMMITS) --out bench-results/longrun-alone.json
	$(PY) -m scripts.bench.longrun --commits $(LONGRUN_COMMITS) --daemon --out bench-results/longrun-daemon.json
	$(PY) -m scripts.bench.plot_longrun bench-results/longrun-alone.json bench-results/longrun-daemon.json --out docs/longrun.svg

# What keeping Apache Hudi's own metadata table costs our commits (p50/p95, maintain / drop).
bench-hudi-metadata: $(VENV)/.installed-test bytecode hudi-peer
	$(PY) -m scripts.bench.hudi_metadata

# `indexer run --format hudi` against Apache Hudi's HoodieIndexer and our native build, on copies of
# one table: column_stats + bloom_filters at 2,000 files, record_index at 10M keys (also in
# `make bench`; about 10 minutes).
bench-hudi-format: $(VENV)/.installed-test bytecode hudi-peer
	$(PY) -m scripts.bench.hudi_format

# Merge-on-read tables: the build over slices with 0, 4, 16 log files each (also in `make bench`).
bench-mor: $(VENV)/.installed-test bytecode
	$(PY) scripts/bench/merge_on_read.py

# The record index and a secondary index at 10M keys in 1,000 files: build against the key-column
# bound and Apache Hudi's HoodieIndexer, size, lookups, tagging (both engines), a secondary-index
# query (also in `make bench`; about 10 minutes).
bench-record-index: $(VENV)/.installed-test bytecode system-deps hudi-peer
	$(PY) scripts/bench/record_index.py

# Tables of 1,000, 2,000, 20,000 and 100,000 small files in 50 commits with random keys: build,
# fresh reads, upserts, each a new process; Apache Hudi's HoodieIndexer on a copy of each; the
# same build on a Spark standalone cluster (master and two workers started here) from another
# copy, and validate of that copy, its equality with the local build (SIZES= for others; about
# 12 minutes a 100,000). At 1,000,000 files, run `scripts/bench/scale.py --sizes 1000,1000000
# --cluster --root DIR` without Hudi: about 50 minutes (build 8, cluster build 13, validate 9),
# after about 20 making the table (DIR/t1000000, made beforehand by scripts/bench/synthetic.py,
# is used as it is). Draws docs/bench-scale.png (matplotlib: the bench extra).
bench-scale: $(VENV)/.installed-bench bytecode system-deps hudi-peer
	$(PY) scripts/bench/scale.py --sizes $(or $(SIZES),1000,2000,20000,100000) --hudi --cluster \
		--plot docs/bench-scale.png

# The full suite: writes docs/benchmarks.md and docs/bench-*.png (about 20 minutes on 2 cores).
bench: $(VENV)/.installed-bench bytecode system-deps hudi-peer
	$(PY) scripts/bench/run_all.py
	$(PY) scripts/bench/schedule_lock.py
	$(PY) -m scripts.bench.hudi_format

$(VENV)/.installed-bench: pyproject.toml | $(PY)
	$(PIP) install -q -e '.[test,bench]'
	touch $@ $(VENV)/.installed $(VENV)/.installed-test

lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# Keeps .cache/hudi-jars (Hudi's bundle, 105 MB): `rm -rf .cache` to fetch it again.
clean:
	rm -rf $(VENV) .venv-hudi .pytest_cache .mypy_cache .ruff_cache
