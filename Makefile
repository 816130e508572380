# cnikit: `make demo` and `make test` are the whole set-up.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
APT_PACKAGES := iproute2 iptables containernetworking-plugins podman runc catatonit golang-github-containernetworking-plugin-dnsname cloud-init golang-go golang-github-appc-cni-dev docker.io docker-compose
# kubectl, a real client of the run's object store (tests/unit/test_kube_clients.py): Debian's
# kubernetes-client, unless the machine has a kubectl already (its /usr/bin/kubectl would clash).
APT_PACKAGES += $(if $(shell command -v kubectl),,kubernetes-client)
STAMP := $(VENV)/.setup-stamp
# Lines pip prints for this machine's optional local indexes; not ours to fix.
PIP_NOISE := is ignored: it is neither\|BuildBackendWarning\|^ *!!\|^ *\*\*\*\|^ *$$

.PHONY: setup bytecode test test-under-load unit lint demo bench mutants localstack clean compose-up compose-down compose-podman compose-docker

setup: $(STAMP)

# Re-install only when the project's dependencies change; idempotent otherwise.
# editable_mode=compat: the checkout on sys.path by a plain .pth line. setuptools' default
# editable finder costs every Python start 20 ms more (40 ms against 20 ms for the CNI
# plugin's, measured), and a run starts the plugin at every pod ADD and DEL. For the same
# reason pip's console script `cnikit-cni` (the venv's Python with site: 17 ms of CPU per
# exec, measured) gives way to the compiled plugin (1.5 ms), or without Go to the Python
# plugin's launcher: target files written by `cnikit certify --init`, the matrix tests'
# among them, name that script as the plugin.
$(STAMP): pyproject.toml scripts/apt-deps.sh Makefile
	@bash scripts/apt-deps.sh $(APT_PACKAGES)
	@test -x $(BIN)/python || { echo "cnikit: creating $(VENV)"; $(PY) -m venv $(VENV); }
	@echo "cnikit: installing cnikit and its Python packages into $(VENV) (the first time takes a minute or two)"
	@set -o pipefail; $(BIN)/python -m pip install --progress-bar off -e '.[dev]' --config-settings editable_mode=compat 2>&1 | $(PY) scripts/pip-progress.py pip
	@echo "cnikit: building the CNI plugin cnikit-cni (Go, offline)"
	@$(BIN)/python -m cnikit.plugin.launcher $(BIN) >/dev/null
	@touch $(STAMP)
	@echo "cnikit: set up"

# Where PYTHONDONTWRITEBYTECODE is set (CI images often set it) Python writes no .pyc, so
# every process of a run (test workers, CLIs, matrix workers) compiled the kit again: 0.35 s
# of CPU each with every scenario loaded (1.1 s against 0.75). Up to date, this is instant.
# The same goes for the compiled CNI plugin (cnikit/plugin/launcher.py): rebuilt here when
# its source changed, not by ten test workers at once.
bytecode: setup
	@$(BIN)/python -m compileall -q cnikit fault_imds faultcore tests bench
	@$(BIN)/python -m cnikit.plugin.launcher $(BIN) >/dev/null

lint: setup
	$(BIN)/ruff check cnikit fault_imds faultcore tests bench

# Tests are independent (each run its own EC2, IMDS, namespaces, ports and run id) and
# spend most of their time waiting on compressed daemon intervals, so one pytest-xdist
# session runs TEST_JOBS of them at once, handed out by tests/conftest.py so that the
# workers end together. Ten keep both cores of a 2-core runner busy to the end: the session
# took 448 s at -n 5, 344-383 s at -n 8 and 323-359 s at -n 10 (610-650 s of CPU each);
# since the compiled plugin and quiet idle daemons, 285-293 s at -n 10 (520-530 s of CPU);
# with four whole certifications of foreign builds (tests/scenarios/test_foreign_builds.py,
# 260-300 s each), 646 s at -n 10 (1216 s of CPU).
# Saturated cores must not change a verdict: the fault IMDS answers no older than EC2
# (faultcore.freshness), and scenarios wait on conditions, not on the machine being idle.
TEST_JOBS ?= 10
# pytest caches the test modules it rewrites for its assertions only where Python may write
# bytecode: with PYTHONDONTWRITEBYTECODE set, each worker rewrote them all again, 3.6 s of
# CPU for a collection against 1.4 s from the cache.
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest
# Tests marked `exclusive` judge what cleanup does to every run on the machine (a dead run
# is any run's to remove): they run alone, after the others.
test: setup lint localstack bytecode
	$(PYTEST) --durations=15 -n $(TEST_JOBS) -m "not exclusive" tests $(PYTEST_ARGS)
	$(PYTEST) --durations=5 -m exclusive tests $(PYTEST_ARGS)

# The same suite beside twice as many busy processes as cores (tests/under_load.py), as on a
# shared CI runner: every verdict must be the quiet machine's.
test-under-load: setup lint localstack bytecode
	$(BIN)/python tests/under_load.py -- $(MAKE) --no-print-directory test

unit: setup bytecode
	$(PYTEST) tests/unit $(PYTEST_ARGS)

demo: setup bytecode
	$(BIN)/cnikit demo

bench: setup bytecode
	$(BIN)/python bench/run_all.py --out bench/results/latest.json

# The kit's detection power: bugs planted in copies of the daemon, each certified (needs
# root; about 3 minutes per mutant on 2 cores). MUTANTS_ARGS=--quick for a short run.
mutants: setup
	$(BIN)/python bench/bench_detection.py $(MUTANTS_ARGS)

# LocalStack lives in its own venv: its pins clash with the kit's (LocalStack 4.14 needs older cbor2, cryptography and pyopenssl).
# Installed once (stamp); `make test` needs it for the LocalStack replay (~65 s here).
LOCALSTACK_STAMP := .venv-localstack/.installed-4.14.0
localstack: $(LOCALSTACK_STAMP)

$(LOCALSTACK_STAMP):
	@echo "cnikit: installing LocalStack 4.14 into .venv-localstack for its replay test (the first time takes a minute or two)"
	@test -x .venv-localstack/bin/python || $(PY) -m venv .venv-localstack
	@set -o pipefail; .venv-localstack/bin/python -m pip install --quiet --upgrade pip 2>&1 | { grep -v "$(PIP_NOISE)" || true; }
	@set -o pipefail; .venv-localstack/bin/python -m pip install --progress-bar off 'localstack-core[runtime]==4.14.0' 'cbor2<6' 'cryptography<45' 'pyopenssl<25' service_identity 2>&1 | $(PY) scripts/pip-progress.py "pip (LocalStack)"
	@touch $(LOCALSTACK_STAMP)

# The Compose stack (docs/containers.md): needs a Docker engine, or COMPOSE=podman-compose.
COMPOSE ?= docker compose
COMPOSE_FILE := compose/docker-compose.yml
compose-up:
	@$(if $(filter docker%,$(COMPOSE)),docker info >/dev/null 2>&1 || { echo "cnikit: compose-up needs a reachable Docker engine (docker info fails; see docs/containers.md)" >&2; exit 2; })
	mkdir -p reports/compose
	$(COMPOSE) -f $(COMPOSE_FILE) up --build -d
	$(COMPOSE) -f $(COMPOSE_FILE) logs -f scenario

compose-down:
	$(COMPOSE) -f $(COMPOSE_FILE) down -v --remove-orphans

# The same file on this machine (no Docker engine, no registry): podman-compose with local images.
compose-podman: setup localstack
	$(BIN)/python -m cnikit.containers.compose_local

# The same file under a private Docker Engine (Debian's dockerd) with Debian's docker-compose 1.29.
compose-docker: setup localstack
	$(BIN)/python -m cnikit.containers.dockerd run -- $(BIN)/python -m cnikit.containers.compose_docker

clean:
	-@test -x $(BIN)/cnikit && $(BIN)/cnikit cleanup --images || true
	rm -rf $(VENV) .venv-localstack .pytest_cache .ruff_cache bench/results reports build *.egg-info
