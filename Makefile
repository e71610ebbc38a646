# metalslurm: the two commands are 'make up' (local cluster) and 'make test'.
SHELL := /bin/bash
VENV ?= .venv
BIN := $(VENV)/bin
STACK ?= Pulumi.local.yaml
APT_PACKAGES := podman runc debootstrap uidmap slirp4netns openssh-client python3-venv tar gnupg
HOST_TOOLS := podman runc debootstrap ssh ssh-keygen gpg gpg-agent dpkg-deb promtool amtool chromium
# promtool and amtool check the monitoring files in 'make unit'; chromium looks at the console
# in 'make e2e'. Without their recommends (chromium's and prometheus' pull in much more).
APT_NO_RECOMMENDS := prometheus prometheus-alertmanager chromium fonts-dejavu-core
# Python keeps what it compiles (__pycache__, ignored by git) for every process the targets
# start, whatever the caller's environment says: where PYTHONDONTWRITEBYTECODE is set, each of
# the suite's Python processes (pytest's, the CLI's, ansible-playbook's) compiled the
# project's modules again, and pytest rewrote every test module again. So the venv is
# installed without compiling its 43,000 files, most never imported; what is imported is
# compiled once, on first use (docs/reference/testing.md).
unexport PYTHONDONTWRITEBYTECODE

# mypy's cache outside the clone (docs/reference/testing.md): a fresh clone checks in 0.5 s, not 36.
MYPY_CACHE ?= $(HOME)/.cache/metalslurm/mypy

.PHONY: deps host-deps up down status test lint unit e2e bench clean

deps: host-deps $(VENV)/.installed

host-deps:
	@missing=""; for t in $(HOST_TOOLS); do command -v $$t >/dev/null || missing="$$missing $$t"; done; \
	python3 -c 'import ensurepip' 2>/dev/null || missing="$$missing python3-venv"; \
	if [ -n "$$missing" ]; then \
		echo "installing host packages (missing:$$missing)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_PACKAGES) \
		&& DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(APT_NO_RECOMMENDS); \
	fi

# uv installs the same pinned set (constraints.txt pins every package, uv too) in a few seconds
# from its cache, where pip takes about 30 s of a fresh clone's start, before anything else can
# run; without uv (no index to fetch it from) or where it fails, pip installs as before.
VENV_PACKAGES := -e '.[dev]' -e ansible/collections -e roles/slurm_elastic/files/metalslurm-power

$(VENV)/.installed: pyproject.toml constraints.txt ansible/collections/pyproject.toml \
		roles/slurm_elastic/files/metalslurm-power/pyproject.toml
	python3 -m venv $(VENV)
	@if $(BIN)/pip install -q -c constraints.txt uv 2>/dev/null \
		&& UV_HTTP_TIMEOUT=30 $(BIN)/uv pip install -q --python $(BIN)/python -c constraints.txt \
			$(VENV_PACKAGES); then echo "installed with uv"; \
	else echo "installing with pip (uv not to be had, or it failed)"; \
		$(BIN)/pip install -q --no-compile -c constraints.txt $(VENV_PACKAGES); fi
	touch $@

up: deps
	$(BIN)/metalslurm local up --stack $(STACK)

down: deps
	$(BIN)/metalslurm local down --stack $(STACK)

status: deps
	$(BIN)/metalslurm local status --stack $(STACK)

lint: deps
	$(BIN)/ruff check infra tests bench roles ansible examples __main__.py
	$(BIN)/shellcheck -x -P SCRIPTDIR examples/*.sbatch examples/*.sh examples/lib/*.sh \
		tests/fixtures/gpu/*.sh tests/fixtures/accept/*.sh tests/fixtures/train/*.sh tests/schedule.sh
	MYPY_CACHE_DIR=$(MYPY_CACHE) $(BIN)/mypy
	$(BIN)/yamllint --strict .
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/ansible-lint
	$(BIN)/pytest -q -p no:cacheprovider tests/lint  # roles stand on their own (tests/lint/test_roles.py)

# Unit tests: the operator side (tests/unit, tests/pulumi), each role's own (roles/*/tests/unit)
# and the collection's (its tests/unit). No container, no network: podman is a stand-in that
# refuses and fails the run (tests/podman_guard.py, loaded by conftest.py).
UNIT_TESTS := tests/unit tests/pulumi roles ansible/collections/ansible_collections/metalslurm/cluster/tests

# One test process per core (pytest-xdist), each test file on one of them (a module's
# fixtures, such as the controller render tests' Ansible run, are made once).
unit: deps
	$(BIN)/pytest -n auto --dist loadfile $(UNIT_TESTS)

# The Debian 13 modules in two lanes (a cluster each) first; the modules with machines of
# their own, and lint and the unit tests, beside them once both lanes' clusters are up
# (tests/schedule.sh says why). 'make e2e' leaves lint and unit out.
e2e: deps
	@bash tests/schedule.sh e2e

test: deps
	@bash tests/schedule.sh all

bench: deps
	$(BIN)/python -m bench.bench_up

clean:
	rm -rf $(VENV) .metalslurm
