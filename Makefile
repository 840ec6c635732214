# The project's commands. Every target bootstraps .venv on a fresh machine (only Python 3.11+ needed).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
READY := $(VENV)/.ready
# mypy cannot follow setuptools' editable import hook, so it reads the package through this tree of links.
TYPECHECK := .typecheck
# The runtime packages that exist so far (each folder is the package wuu.<folder>).
PACKAGES := $(foreach pkg,generated worker host conformance,$(if $(wildcard $(pkg)/__init__.py),$(pkg)))

ENGINES := .cache/engines
# The external engines' CLIs the engine-adapter tests run, pinned (their npm packages ship native binaries).
ENGINE_PACKAGES := @openai/codex@0.171.0 @anthropic-ai/claude-code@2.1.332 typescript@5.9.3

.PHONY: all venv engines bytecode generate check-generated lint breaking typecheck test chaos conformance bench docker-image dev dev-personal node-pack clean

all: test

venv: $(READY)

$(READY): pyproject.toml setup.py worker/native/confine.c
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

## engines: install the Codex and Claude Code CLIs under .cache/engines (npm), for the engine-adapter tests, and
## TypeScript's compiler, which type-checks the Node SDK's generated declarations
engines:
	npm install --prefix $(ENGINES) --no-audit --no-fund --no-save --loglevel=error $(ENGINE_PACKAGES)

## bytecode: compile the checkout's modules once. Where PYTHONDONTWRITEBYTECODE is set (as on CI) every
## spawned worker and host would otherwise compile them from source again (a third of a host's start-up).
bytecode: $(READY)
	$(PY) -m compileall -q -j 0 $(PACKAGES) tests tools >/dev/null

## generate: spec/ -> generated/ (deterministic; commit the result)
generate: $(READY)
	$(PY) -m tools.generate

## check-generated: fail, printing the diff, if generated/ is not what `make generate` writes
check-generated: $(READY)
	$(PY) -m tools.generate --check

## lint: the spec's conventions, proto lint and parity, the import layers, ruff and mypy
lint: $(READY) typecheck breaking
	$(PY) -m tools.speclint
	cd spec/proto && ../../$(VENV)/bin/buf lint
	$(PY) -m tools.parity
	$(VENV)/bin/lint-imports --no-logo
	$(PY) -m ruff check .
	$(PY) -m ruff format --check tools tests $(filter-out generated,$(PACKAGES))

## breaking: fail on a wire- or JSON-breaking change of spec/proto against the protos committed on main
BREAKING_AGAINST ?= ../../.git\#branch=main,subdir=spec/proto
breaking: $(READY)
	@if git cat-file -e main:spec/proto/buf.yaml 2>/dev/null; then \
		cd spec/proto && ../../$(VENV)/bin/buf breaking --against '$(BREAKING_AGAINST)'; \
	else echo "breaking: main has no spec/proto yet; nothing to compare"; fi

typecheck: $(READY)
	@mkdir -p $(TYPECHECK)/wuu
	@for pkg in $(PACKAGES); do ln -sfn ../../$$pkg $(TYPECHECK)/wuu/$$pkg; done
	MYPYPATH=$(TYPECHECK) $(PY) -m mypy $(foreach pkg,$(PACKAGES),-p wuu.$(pkg))

## test: everything CI checks (drift, lint, types, tests)
test: check-generated lint bytecode
	$(PY) -m pytest -q -n 2

## chaos: the fault campaign at full size, one table (fuzz, EOF/output failure, kill -9 per backend and of the
## Personal host during approvals, background tasks and memory corrections, path escapes, schemathesis with 1000 examples per operation, token races,
## two user hosts on one home, slot squatting, header slowloris; kill -9 of the legacy ledger migration);
## CHAOS_ARGS passes --seed/--only/--json; `make test` runs every row small (tests/chaos)
chaos: bytecode
	$(PY) -m tools.chaos $(CHAOS_ARGS)
	WUU_DIFFERENTIAL_EXAMPLES=1000 $(PY) -m pytest -q -n 2 tests/spec/test_differential.py tests/spec/test_plain.py
	WUU_CHAOS_SCALE=8 $(PY) -m pytest -q tests/host/userhost/review/test_chaos.py

## conformance: both suites against the reference implementations: the worker suite against the native
## worker and the Node example adapter, the user-host suite against `wuu-userhost serve` of the Personal bundle
## and of a coding host (reports, build/*.json)
SERVE_USERHOST := $(VENV)/bin/wuu-userhost serve --home {home} --user-space {user_space} \
	--product-domain {product_domain} --isolation {isolation} --stdio --listen unix:{socket}
USERHOST := $(SERVE_USERHOST) --composition-profile personal
conformance: bytecode
	@mkdir -p build
	$(VENV)/bin/wuu-conformance run --jobs 2 --json build/conformance-native.json -- $(PY) -m wuu.worker
	$(VENV)/bin/wuu-conformance run --jobs 2 --json build/conformance-node.json -- node conformance/examples/node/worker.mjs
	$(VENV)/bin/wuu-conformance run --suite userhost --jobs 2 --json build/conformance-userhost.json -- $(USERHOST)
	$(VENV)/bin/wuu-conformance run --suite userhost --product-domain coding --jobs 2 \
		--json build/conformance-userhost-coding.json -- $(SERVE_USERHOST)

## bench: speed figures beside a raw baseline measured in the same run (table, bench.json; BENCH_ARGS=--quick)
bench: bytecode
	$(PY) -m tools.bench $(BENCH_ARGS)

## dev: a local Personal host of the demo space in the foreground until Ctrl-C, printing how to connect
## (python -m tools.dev); WUU_HOME=/absolute/path keeps its data, else the home is a throw-away folder
dev: bytecode
	$(PY) -m tools.dev

## dev-personal: an alias of dev
dev-personal: dev

## docker-image: the worker image for the docker backend, built offline (debootstrap + this checkout)
docker-image: $(READY)
	PYTHON=$(PY) tools/docker/build-image.sh

## node-pack: the Node SDK as an npm tarball, dist/wuu-plugin-sdk-<version>.tgz (generated files included)
node-pack: $(READY)
	$(PY) -m tools.node_pack

clean:
	rm -rf $(VENV) $(TYPECHECK) .mypy_cache .pytest_cache .ruff_cache .import_linter_cache build dist *.egg-info
