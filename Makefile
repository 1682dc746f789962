# coscheduling: make test (what CI runs), make demo (the main job on a local control plane).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
WORKDIR ?= $(CURDIR)/.localcluster

.PHONY: all venv test unit integration lint cluster cluster-down demo clean

all: test

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

# Every test, the real-control-plane ones included. The first run builds etcd,
# kube-apiserver and kube-controller-manager from Go modules (several minutes, cached).
test: $(STAMP)
	$(PY) -m coscheduling.localcluster.build
	$(PY) -m pytest tests -q

unit: $(STAMP)
	$(PY) -m pytest tests/unit -q

integration: $(STAMP)
	$(PY) -m pytest tests/integration -q

lint: $(STAMP)
	$(VENV)/bin/ruff check coscheduling tests
	$(VENV)/bin/mypy coscheduling

# The main job: the seed examples on a local control plane started here, then stopped.
demo: $(STAMP)
	$(PY) -m coscheduling.demo

# Start a local control plane and leave it running; prints the kubeconfig path.
cluster: $(STAMP)
	$(PY) -m coscheduling localcluster up --workdir $(WORKDIR)

cluster-down: $(STAMP)
	$(PY) -m coscheduling localcluster down --workdir $(WORKDIR)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
