# coscheduling: make test and make test-real (what CI runs), make demo (the main job).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
WORKDIR ?= $(CURDIR)/.localcluster

.PHONY: all venv lock image-context test test-real unit integration lint proto proto-check proto-kubernetes cluster \
	cluster-down demo clean node-packages image image-packages e2e krew-archive helm

all: test

# The virtualenv from the lock (requirements/dev.txt: every runtime and dev dependency, and
# the build backend, pinned with hashes); the project itself on top, without resolving.
$(STAMP): pyproject.toml requirements/dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --require-hashes -r requirements/dev.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

venv: $(STAMP)

# Re-resolve the locks (uv, from the dev lock) after a dependency changes in pyproject.toml:
# runtime (the image), dev (make venv), bench (make bench). Hashes of every file the index has
# for each pinned version, so the locks install on any platform.
LOCK := $(VENV)/bin/uv pip compile --quiet --generate-hashes --python-version 3.11 \
	--universal --no-header
lock: $(STAMP)
	$(LOCK) pyproject.toml -o requirements/runtime.txt
	$(LOCK) pyproject.toml requirements/build.in --extra dev -o requirements/dev.txt
	$(LOCK) pyproject.toml requirements/build.in --extra dev --extra bench \
		-o requirements/bench.txt

# What `docker build` needs, in build/image-context: the Dockerfile, the runtime lock, a
# wheelhouse of exactly the locked wheels plus the project's own (the same bytes for the
# same sources, so `make image` reuses its layers), and pip's wheel as Python's
# ensurepip bundles it (the image's first stage runs pip from it). Then proves the image's
# install works offline: a fresh virtualenv installs from the wheelhouse alone (--no-index,
# --require-hashes) and runs the command. No image is built here (no container engine).
IMAGE_CONTEXT := build/image-context
image-context: $(STAMP)
	rm -rf $(IMAGE_CONTEXT) && mkdir -p $(IMAGE_CONTEXT)/wheelhouse $(IMAGE_CONTEXT)/requirements
	cp deploy/Dockerfile $(IMAGE_CONTEXT)/Dockerfile
	cp requirements/runtime.txt $(IMAGE_CONTEXT)/requirements/
	mkdir -p $(IMAGE_CONTEXT)/tools && cp $$($(PY) -c 'import ensurepip, pathlib; \
		print(next(pathlib.Path(ensurepip.__file__).parent.glob("_bundled/pip-*.whl")))') \
		$(IMAGE_CONTEXT)/tools/
	$(PY) -m pip download --quiet --require-hashes --only-binary=:all: --python-version 3.11 \
		--platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
		-r requirements/runtime.txt -d $(IMAGE_CONTEXT)/wheelhouse
	SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct) \
		$(PY) -m pip wheel --quiet --no-deps --no-build-isolation -w $(IMAGE_CONTEXT)/wheelhouse .
	rm -rf $(IMAGE_CONTEXT)/.check && $(PYTHON) -m venv $(IMAGE_CONTEXT)/.check
	$(IMAGE_CONTEXT)/.check/bin/pip install --quiet --no-index \
		--find-links $(IMAGE_CONTEXT)/wheelhouse --require-hashes -r requirements/runtime.txt
	$(IMAGE_CONTEXT)/.check/bin/pip install --quiet --no-index --no-deps \
		$(IMAGE_CONTEXT)/wheelhouse/coscheduling-*.whl
	$(IMAGE_CONTEXT)/.check/bin/coscheduling --help > /dev/null
	$(IMAGE_CONTEXT)/.check/bin/python -c "import coscheduling.service.wiring, coscheduling.server"
	rm -rf $(IMAGE_CONTEXT)/.check
	@echo "image-context: $(IMAGE_CONTEXT) installs offline from the lock;" \
		"build it with: make image, or docker build --build-arg BASE=... $(IMAGE_CONTEXT)"

# The scheduler's image (the chart's coscheduling:0.1.0), built here with buildah from
# deploy/Dockerfile on a base debootstrap makes from Debian packages (cached under
# ~/.cache/coscheduling/image-base); BASE=<image> builds on a registry's base instead.
# Writes build/coscheduling-image.tar (an OCI archive `ctr images import` reads) and
# build/image.json, and prints the digest, size and layers. The same inputs build once.
BASE ?=
image: image-context image-packages
	$(PY) -m coscheduling.localcluster.image_build --context $(IMAGE_CONTEXT) --out build \
		$(if $(BASE),--base $(BASE))

# What `make image` needs from Debian: buildah builds, debootstrap makes the base, skopeo
# and umoci read images. Installs only what is missing (apt-get needs root and a mirror).
IMAGE_PACKAGES := buildah debootstrap skopeo umoci
image-packages:
	@$(call apt_ensure,image-packages,$(IMAGE_PACKAGES))

# $(call apt_ensure,TARGET,PACKAGES): apt-get installs those of PACKAGES not installed yet.
define apt_ensure
missing=$$(for package in $(2); do \
	dpkg-query -W -f='$${Status}' $$package 2>/dev/null | grep -q 'ok installed' \
	|| echo $$package; done); \
if [ -n "$$missing" ]; then \
	echo "$(1): installing" $$missing; \
	apt-get update -q && DEBIAN_FRONTEND=noninteractive \
	apt-get install -y -q --no-install-recommends $$missing; \
else echo "$(1): installed: $(2)"; fi
endef

# The unit tests and the real-control-plane integration tests, but those marked `real` (real
# containers on kubelets, operators built from Go modules: `make test-real`). The first run
# builds etcd, kube-apiserver and kube-controller-manager from Go modules (several minutes,
# cached). CI runs both targets.
test: $(STAMP) node-packages
	$(PY) -m coscheduling.localcluster
	$(PY) -m pytest tests -q -m "not real"

# The tests marked `real` (tests/integration/conftest.py, REAL_RUN_FILES): kubelets running
# containers, the scheduler's image and chart end to end, and the operators and workload
# controllers built from Go modules (about 10 minutes past the builds).
test-real: $(STAMP) node-packages image-packages
	$(PY) -m pytest tests -q -m real

unit: $(STAMP)
	$(PY) -m pytest tests/unit -q

integration: $(STAMP) node-packages
	$(PY) -m pytest tests/integration -q

# End to end on real nodes, alone (`make test-real`, and so CI, runs it too: about 2.5 minutes past
# the builds): a control plane of its own with kube-scheduler, kube-proxy and three kubelets; the scheduler's image
# (built by the test, reused when built) imported into their containerd; the chart installed
# with its defaults; a gang all or nothing, a leader lost, a what-if through port-forward, an
# upgrade and an uninstall. Each step prints what it did and how long it took.
e2e: $(STAMP) node-packages image-packages
	$(PY) -m pytest tests/integration/test_e2e.py -q -s

# Ruff, mypy --strict, and the import contracts of pyproject.toml (layers only point down,
# no import cycle, nobody but its registry and the service wiring imports the gang plugin).
lint: $(STAMP)
	$(VENV)/bin/ruff check coscheduling tests bench
	$(VENV)/bin/mypy coscheduling
	$(VENV)/bin/lint-imports

# The gRPC code in coscheduling/server/gen, from proto/ with the pinned grpcio-tools.
proto: $(STAMP)
	$(PY) proto/generate.py coscheduling/server/gen coscheduling/cluster/kubeproto

# Fails when the committed generated code differs from what proto/ generates (CI).
proto-check: $(STAMP)
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	$(PY) proto/generate.py "$$tmp/gen" "$$tmp/kubeproto" 2>/dev/null && \
	diff -r -x __pycache__ "$$tmp/gen" coscheduling/server/gen && \
	diff -r -x __pycache__ "$$tmp/kubeproto" coscheduling/cluster/kubeproto && \
	echo "proto-check: coscheduling/server/gen and coscheduling/cluster/kubeproto are up to date"

# The Kubernetes .proto files in proto/k8s.io, again from the Go modules of the local control
# plane's release (then `make proto`).
proto-kubernetes: $(STAMP)
	$(PY) proto/fetch_kubernetes.py

# kubectl gang's krew archive (dist/kubectl-gang.zip) and its sha256, which
# deploy/krew/gang.yaml names: kubectl krew install --manifest=... --archive=...
krew-archive:
	$(PYTHON) deploy/krew/archive.py dist/kubectl-gang.zip

# The main job: the seed examples on a local control plane started here, then stopped.
demo: $(STAMP)
	$(PY) -m coscheduling.commands.demo

# Long fault runs (not part of `make test`): 100 kill -9 points, 60 s outages, then 100
# releases cut off after their K-th bind (COSCHEDULING_FAULT); it ends by printing how many
# partially bound gangs it met and how many were completed before any other gang.
chaos: $(STAMP)
	$(PY) -m coscheduling.localcluster
	COSCHEDULING_KILL_POINTS=100 COSCHEDULING_OUTAGE_SECONDS=60 \
		$(PY) -m pytest tests/integration/test_faults.py -q -s -k "not release_killed" \
		--timeout 3600
	COSCHEDULING_FAULT_POINTS=100 \
		$(PY) -m pytest tests/integration/test_faults.py -q -s -k release_killed --timeout 3600

# Memory under load: 2000 nodes, 10000 pending gang pods, 5 minutes of churn.
soak: $(STAMP)
	$(PY) -m bench.soak --minutes 5 --nodes 2000 --pods 10000 --out bench-results/soak

# Start a local control plane and leave it running; prints the kubeconfig path.
# REAL_NODES=2 also starts two kubelets that run pods, with kube-scheduler and kube-proxy
# (needs root and `make node-packages`).
REAL_NODES ?= 0
cluster: $(STAMP)
	$(PY) -m coscheduling localcluster up --workdir $(WORKDIR) --real-nodes $(REAL_NODES)

# What the real nodes need from Debian: containerd and runc run the containers, the CNI
# plugins give pods a network, static busybox fills the images built here. Installs only
# what is missing (apt-get needs root and a reachable Debian mirror).
NODE_PACKAGES := containerd runc containernetworking-plugins busybox-static
node-packages:
	@$(call apt_ensure,node-packages,$(NODE_PACKAGES))

# helm 3, built once from Go modules like the control plane (no release archive is
# downloaded); prints its path.
helm: $(STAMP)
	@$(PY) -c "from coscheduling.localcluster.build import ensure_helm; print(ensure_helm())"

cluster-down: $(STAMP)
	$(PY) -m coscheduling localcluster down --workdir $(WORKDIR)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info build

# Benchmark (not part of the tests): W1-W9 (and W1, W2 trickled) against the API ceiling,
# upstream kube-scheduler + scheduler-plugins coscheduling (built once from Go modules),
# kube-scheduler's native gang scheduling (if built) and ours, each with its own client
# limits and with equal ones, 3 runs per cell; hours at scale 1 (BENCH_ARGS=--scale 0.1).
# Results in bench-results/<timestamp>/; a full run refreshes bench/RESULTS.md.
.PHONY: bench bench-smoke
BENCH_STAMP := $(VENV)/.bench-installed
BENCH_ARGS ?=

$(BENCH_STAMP): $(STAMP) requirements/bench.txt
	$(PY) -m pip install --quiet --require-hashes -r requirements/bench.txt
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(PY) -m coscheduling.localcluster
	$(PY) -m bench.upstream
	$(PY) -m bench.run $(BENCH_ARGS)

# A tenth of every size and a short W3 settle time: a few minutes, for checking the harness.
bench-smoke: $(BENCH_STAMP)
	$(PY) -m coscheduling.localcluster
	$(PY) -m bench.upstream
	$(PY) -m bench.run --scale 0.1 --settle 15 --no-profile --repeat 1 \
		--schedulers ceiling,upstream-eq,native-eq,ours-eq $(BENCH_ARGS)
