# The two commands a newcomer needs: `make demo` and `make test` (see README.md).
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST := hack/pytest.sh
# Outside the repository, so a clean clone (CI) starts from the last run's cache: mypy checks
# each cached module's source hash, so a stale entry is rechecked, never trusted (40 s -> 5 s).
MYPY_CACHE_DIR ?= $(HOME)/.cache/snapshotjob/mypy
PACKAGES := snapshotjob_contract snapshot_protocol snapshot_store operator/snapshot_operator spark_runtime

.PHONY: help install demo demo-local demo-down test test-unit test-integration test-e2e test-slow \
        check lint format typecheck contracts docs-check crds docs bench run-operator clean \
        release release-dry-run

help: ## List the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

install: ## Set up everything on a fresh machine (idempotent): venv, Java 17, Hazelcast jar, jvm/ built, PostgreSQL
	@bash hack/install.sh

demo: install ## The operator on a local kind cluster: snapshots, a lost driver, suspend/resume, exact result
	@$(PY) -m examples.demo_cluster up

demo-down: ## Remove the demo: helm uninstall, then delete its kind cluster
	@$(PY) -m examples.demo_cluster down

demo-local: install ## Run the main job without Kubernetes: sequence sum, then word count, exactly-once into PostgreSQL
	@$(PY) -m examples.demo sequence-sum
	@$(PY) -m examples.demo word-count

bench: install ## Run every benchmark (each prints its figures and ends with one JSON line)
	@$(PY) bench/snapshot_store.py
	@$(PY) bench/durable_bandwidth.py
	@$(PY) -m bench.durable_copy_cost
	@$(PY) -m bench.overhead
	@$(PY) -m bench.epoch_floor
	@$(PY) bench/reconcile_latency.py
	@$(PY) bench/driver_start.py
	@$(PY) -m bench.kafka_pipeline
	@$(PY) -m bench.record_latency
	@$(PY) -m bench.incremental_snapshot

run-operator: install ## Run the operator against the current kubeconfig (see docs/reference/operator.md for flags)
	@$(PY) -m snapshot_operator $(OPERATOR_ARGS)

test: install ## Lint, type checks, import contracts, then every test tier (hack/test.sh)
	@bash hack/test.sh

test-unit: install ## Unit tests only (pure logic, start no process)
	@$(PYTEST) -m unit tests

test-integration: install ## Integration tests against real Hazelcast, PostgreSQL, Spark (and helm)
	@$(PYTEST) -m integration tests

test-e2e: install ## End-to-end tests on a real Kubernetes cluster
	@$(PYTEST) -m e2e tests

test-slow: install ## Only the tests marked slow
	@$(PYTEST) -m slow tests

check: lint typecheck contracts docs-check ## Static checks: ruff, mypy, import-linter, docs links

lint: install ## ruff lint and format check
	@echo "==> ruff"
	@$(VENV)/bin/ruff check .
	@$(VENV)/bin/ruff format --check .

format: install ## Apply ruff's fixes and formatting
	@$(VENV)/bin/ruff check --fix .
	@$(VENV)/bin/ruff format .

typecheck: install ## mypy --strict on the packages, the test bed and its pytest plugins
	@echo "==> mypy"
	@$(VENV)/bin/mypy --cache-dir $(MYPY_CACHE_DIR) $(PACKAGES) testbed tests/fixtures examples tests/e2e/pipelines

docs-check: install ## Every relative link and anchor in the Markdown files resolves
	@echo "==> docs links"
	@$(PY) hack/check_docs_links.py

contracts: install ## Import-layer contracts (import-linter)
	@echo "==> import-linter"
	@$(VENV)/bin/lint-imports

crds: install ## Render the SnapshotJob CRD (crds/ and the chart) from the API models
	@$(PY) -m snapshot_operator.api.crd -o crds/snapshotjob.yaml \
		-o charts/snapshotjob-operator/crds/snapshotjob.yaml

docs: install ## Render the generated reference pages (docs/reference: exit codes, conditions and Events, CLI) from the code
	@$(PY) hack/render_reference_docs.py

release: install ## Cut release VERSION=x.y.z: stamp, CHANGELOG, images, chart, commit, tag
	@$(PY) hack/release.py release $(or $(VERSION),$(error Usage: make release VERSION=x.y.z))

release-dry-run: install ## The same release in a temporary clone: nothing committed or tagged
	@$(PY) hack/release.py release --dry-run $(or $(VERSION),$(error Usage: make release-dry-run VERSION=x.y.z))

clean: ## Remove the virtualenv and caches inside the repository
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis *.egg-info

include mk/kube.mk
include mk/images.mk
