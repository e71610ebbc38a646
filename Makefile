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

$(VENV)/.installed: pyproject.toml constraints.txt ansible/collections/pyproject.toml \
		roles/slurm_elastic/files/metalslurm-power/pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]' -e ansible/collections \
		-e roles/slurm_elastic/files/metalslurm-power
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
		tests/fixtures/gpu/*.sh tests/fixtures/accept/*.sh
	$(BIN)/mypy
	$(BIN)/yamllint --strict .
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/ansible-lint
	$(BIN)/pytest -q -p no:cacheprovider tests/lint  # roles stand on their own (tests/lint/test_roles.py)

# Unit tests: the operator side (tests/unit, tests/pulumi), each role's own (roles/*/tests/unit)
# and the collection's (its tests/unit). No container, no network: podman is a stand-in that
# refuses and fails the run (tests/podman_guard.py, loaded by conftest.py).
UNIT_TESTS := tests/unit tests/pulumi roles ansible/collections/ansible_collections/metalslurm/cluster/tests

# One test process per core (pytest-xdist), each test file on one of them (a module's
# fixtures, such as test_render.py's Ansible run, are made once).
unit: deps
	$(BIN)/pytest -n auto --dist loadfile $(UNIT_TESTS)

# Two pytest processes at once: the Debian 12 module, which brings up and removes its own
# cluster, beside the modules of the shared Debian 13 cluster (they share nothing: names,
# networks, state directories). The Debian 12 run's output follows the other's.
E2E_DEBIAN12 := tests/e2e/test_local_cluster_debian12.py
e2e: deps
	@mkdir -p .metalslurm
	@$(BIN)/pytest $(E2E_DEBIAN12) -p no:cacheprovider --durations=10 \
		> .metalslurm/e2e-debian12.log 2>&1 & debian12=$$!; \
	$(BIN)/pytest tests/e2e --ignore=$(E2E_DEBIAN12) --durations=20; rc=$$?; \
	wait $$debian12; rc12=$$?; \
	echo "== the Debian 12 module (run beside the others; exit $$rc12) =="; \
	cat .metalslurm/e2e-debian12.log; \
	[ $$rc -eq 0 ] && [ $$rc12 -eq 0 ]

# Lint runs one tool at a time and leaves a core idle; the unit tests use every core: side by
# side, lint costs no time of its own (159 s for both against 190 s one after the other).
test: deps
	$(MAKE) --no-print-directory -j2 --output-sync=target lint unit
	$(MAKE) --no-print-directory e2e

bench: deps
	$(BIN)/python -m bench.bench_up

clean:
	rm -rf $(VENV) .metalslurm
