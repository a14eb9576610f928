# Slipway — developer entry points. `make install && make test` from a fresh clone.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
CACHE := .cache
CONTROLPLANE := $(CACHE)/controlplane/controlplane
NODE := $(CACHE)/node/node
PROMETHEUS := $(CACHE)/prometheus/prometheus
METRICS_SERVER := $(CACHE)/metrics-server/metrics-server
TRAEFIK := $(CACHE)/traefik/traefik
HEALTH := $(CACHE)/health/health
PROMQL_ORACLE := $(CACHE)/promqlparse/promqlparse
HELM := $(CACHE)/helm/helm
ARGO_ROLLOUTS := $(CACHE)/argo-rollouts/rollouts-controller
KWOK := $(CACHE)/kwok/kwok
KUEUE := $(CACHE)/kueue/kueue
JOBSET := $(CACHE)/jobset/jobset
KEDA := $(CACHE)/keda/keda-operator
GIE := $(CACHE)/gie/epp
# The generated copies of the CRDs (charts/slipway/files/crds/ links to crds/).
CRD_DIRS := crds charts/slipway-crds/files
export GOTOOLCHAIN := local

.DEFAULT_GOAL := help
.PHONY: help install lock lock-mlflow image mlflow-env mlflow-oldest-env test-mlflow-contract controlplane node prometheus metrics-server traefik health-tool promql-oracle helm kueue jobset keda gie crds docs reference verify lint types test test-fast test-unit test-faults test-integration \
        cluster-up cluster-down demo demo-down e2e-kind clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 18

install: $(VENV)/.installed mlflow-env  ## Python env for the operator, workloads, local cluster and tests


# The editable install warns that a folder named like a package in the working directory may
# shadow it; none is (operator/slipway is mapped by name in pyproject.toml): silenced.
# Two distributions: slipway-operator (what ships) and e2e/'s slipway-testcluster (localkube and
# slipway_e2e, development only). A venv from before the rename holds a distribution `slipway`
# whose files the new one shares: it goes first.
# Supply chain: constraints.txt pins every package (pip and setuptools included) with the sha256 of each
# of its files on the package index. The pins go in first, in pip's hash-checking mode, wheels only
# (nothing built, so no unhashed build dependency is fetched); then the two editable projects, which
# cannot be hashed, with no index at all: a dependency pyproject.toml names but the lock lacks fails here.
$(VENV)/.installed: pyproject.toml e2e/pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip uninstall -q -y slipway 2>/dev/null || true
	$(PY) -m pip install -q --require-hashes --only-binary :all: --no-deps -r constraints.txt
	PYTHONWARNINGS='ignore:Editable installation' $(PY) -m pip install -q --no-index --no-build-isolation \
	  -e '.[dev,workloads,docs]' -e ./e2e || { echo "make install: constraints.txt lacks a dependency of pyproject.toml: run make lock" >&2; exit 1; }
	$(PY) -m pip check
	touch $@

lock:  ## pin every Python package again (constraints.txt, with hashes) from a fresh resolve of pyproject.toml's ranges
	PYTHONWARNINGS='ignore:Editable installation' $(PYTHON) release/lock.py constraints.txt -- -e '.[dev,workloads,docs]' -e ./e2e

lock-mlflow:  ## pin the test MLflow servers' virtualenvs again (e2e/constraints-mlflow*.txt, with hashes)
	$(PYTHON) release/lock.py e2e/constraints-mlflow.txt -- -r e2e/requirements-mlflow.txt
	$(PYTHON) release/lock.py e2e/constraints-mlflow-oldest.txt -- -r e2e/requirements-mlflow-oldest.txt

# MLflow's server pins python-dateutil<3 while the kubernetes client needs >=3,
# so the server lives in its own virtualenv; Slipway talks to it over REST.
mlflow-env: $(CACHE)/mlflow-venv/.installed
$(CACHE)/mlflow-venv/.installed: e2e/requirements-mlflow.txt e2e/constraints-mlflow.txt
	$(PYTHON) -m venv $(CACHE)/mlflow-venv
	$(CACHE)/mlflow-venv/bin/pip install -q --require-hashes --only-binary :all: --no-deps -r e2e/constraints-mlflow.txt
	$(CACHE)/mlflow-venv/bin/pip install -q --no-index -r e2e/requirements-mlflow.txt
	touch $@

# The oldest MLflow release Slipway supports, for the MLflow contract phase (tests/tools/mlflow_contract.py).
mlflow-oldest-env: $(CACHE)/mlflow-venv-oldest/.installed
$(CACHE)/mlflow-venv-oldest/.installed: e2e/requirements-mlflow-oldest.txt e2e/constraints-mlflow-oldest.txt
	$(PYTHON) -m venv $(CACHE)/mlflow-venv-oldest
	$(CACHE)/mlflow-venv-oldest/bin/pip install -q --require-hashes --only-binary :all: --no-deps -r e2e/constraints-mlflow-oldest.txt
	$(CACHE)/mlflow-venv-oldest/bin/pip install -q --no-index -r e2e/requirements-mlflow-oldest.txt
	touch $@

test-mlflow-contract: $(VENV)/.installed mlflow-env mlflow-oldest-env  ## the MLflow contract tests against the oldest and the newest MLflow Slipway supports
	$(PY) tests/tools/mlflow_contract.py

controlplane: $(CONTROLPLANE)  ## build etcd + kube-* from upstream Go modules (cached)
$(CONTROLPLANE): e2e/controlplane/go.mod e2e/controlplane/go.sum $(wildcard e2e/controlplane/*.go) e2e/controlplane/build.sh
	bash e2e/controlplane/build.sh $(CONTROLPLANE)

# The real node (RUNTIME=containerd): kubelet and kube-proxy from the control plane's own go.mod.
node: $(NODE)  ## build kubelet + kube-proxy from the control plane's Go modules (cached), with Debian's containerd, runc and CNI plugins
	bash e2e/node/packages.sh
$(NODE): e2e/node/build.sh $(wildcard e2e/node/*.go) e2e/controlplane/go.mod e2e/controlplane/go.sum
	bash e2e/node/build.sh $(NODE)

# Upstream Prometheus with Kubernetes service discovery (Debian's package has none).
metrics-server: $(METRICS_SERVER)  ## build metrics-server from the Go module proxy (cached)
$(METRICS_SERVER): e2e/controlplane/build-metrics-server.sh e2e/go-build.sh
	bash e2e/controlplane/build-metrics-server.sh $(METRICS_SERVER)

traefik: $(TRAEFIK)  ## build Traefik (the local Gateway API data plane) from the Go module proxy (cached)
$(TRAEFIK): e2e/gateway/build-traefik.sh e2e/go-build.sh e2e/gateway/go.mod e2e/gateway/go.sum
	bash e2e/gateway/build-traefik.sh $(TRAEFIK)

kueue: $(KUEUE)  ## build Kueue (quotas, admission, preemption for TrainingRuns) from the Go module proxy (cached)
$(KUEUE): e2e/batch/build.sh e2e/go-build.sh
	bash e2e/batch/build.sh kueue $(KUEUE)

keda: $(KEDA)  ## build KEDA (its operator and metrics adapter: ScaledObjects for spec.autoscaling.mode External) from the Go module proxy (cached)
$(KEDA): e2e/keda/build.sh e2e/go-build.sh
	bash e2e/keda/build.sh $(dir $(KEDA))

gie: $(GIE)  ## build the Gateway API Inference Extension's endpoint picker (EPP) and unpack its CRDs, from the Go module proxy (cached)
$(GIE): e2e/gie/build.sh e2e/go-build.sh
	bash e2e/gie/build.sh $(dir $(GIE))

jobset: $(JOBSET)  ## build JobSet (multi-node TrainingRuns as one gang) from the Go module proxy (cached)
$(JOBSET): e2e/batch/build.sh e2e/go-build.sh
	bash e2e/batch/build.sh jobset $(JOBSET)

health-tool: $(HEALTH)  ## build the Argo CD (gopher-lua: health and resource actions), kstatus (cli-utils) and Flux (CEL) checker the tests use
$(HEALTH): e2e/health/go.mod e2e/health/go.sum $(wildcard e2e/health/*.go)
	cd e2e/health && CGO_ENABLED=0 go build -trimpath -o $(abspath $(HEALTH)) .

promql-oracle: $(PROMQL_ORACLE)  ## build Prometheus' PromQL parser as a command: the unit tests fuzz the queries' confinement against it
$(PROMQL_ORACLE): tests/tools/promqlparse/go.mod tests/tools/promqlparse/go.sum tests/tools/promqlparse/main.go
	cd tests/tools/promqlparse && CGO_ENABLED=0 go build -trimpath -o $(abspath $(PROMQL_ORACLE)) .

helm: $(HELM)  ## build Helm from the Go module proxy (cached): the chart tests lint, render and install charts/slipway
$(HELM): e2e/helm/build-helm.sh e2e/go-build.sh
	bash e2e/helm/build-helm.sh $(HELM)

prometheus: $(PROMETHEUS)  ## build Prometheus from the Go module proxy (cached)
$(PROMETHEUS): e2e/controlplane/build-prometheus.sh e2e/go-build.sh
	bash e2e/controlplane/build-prometheus.sh $(PROMETHEUS)

# The documentation site (docs/, Sphinx with MyST and Furo). Strict: any warning fails the build,
# a link to a page or heading that does not exist included; external links are never followed.
DOCS_OUT := docs/_build/html
docs: $(VENV)/.installed  ## build the documentation site strictly into docs/_build/html (part of make verify and make test)
	rm -rf $(DOCS_OUT)
	$(VENV)/bin/sphinx-build -q -E -W --keep-going -n -b html docs $(DOCS_OUT)
	@echo "docs: $(DOCS_OUT)/index.html"

reference: $(VENV)/.installed  ## regenerate docs/reference/ from the code (the API, reasons, metrics, labels, kubectl slipway)
	$(PY) -m slipway.reference docs/reference

# Images without Docker: buildah (Debian's, installed if missing) builds images/Dockerfile twice on a
# base made by mmdebstrap from Debian's packages (cached in .cache/images/), from wheels built here.
# The operator image's file list and a run of each image as UID 65532 on a read-only root are
# steps of the build: a failure fails it. dist/images.txt lists the archives and their digests.
image: $(VENV)/.installed  ## the operator and workloads images (buildah, no Docker daemon): OCI archives in dist/
	bash images/build.sh

# Releases (release/): one version source, the git tags vX.Y.Z (0.1.0 until the first), stamped into
# slipway/_version.py, the chart and manifests/ by `make version VERSION=X.Y.Z` (a release commit; the
# unit tests fail while a file disagrees). `make release` writes dist/VERSION/ (release/bundle.py): both
# image archives, install.yaml and the chart with the images by digest, the wheel and SHA256SUMS. No
# registry, no Docker; a VERSION other than the tree's is stamped into a copy, never into the tree.
# Supply chain (release/supply.py): each image's SBOM (syft), the base's package list, SHA256SUMS and the
# archives signed with SIGNING_KEY (an OpenSSH private key); refused from a working tree with changes.
# `make plugin`: the kubectl plugin alone (release/plugin.py, no image, no venv), also part of `make release`.
# Development builds: ALLOW_DIRTY=1 (uncommitted changes), UNSIGNED=1 (no key).
.PHONY: version release plugin syft
REGISTRY ?= ghcr.io/slipway-dev
SYFT := $(CACHE)/syft/syft
version:  ## print the version (from the git tags); VERSION=X.Y.Z stamps it into the tree for a release commit
	$(if $(VERSION),$(PY) release/versioning.py --stamp $(VERSION),@$(PY) release/versioning.py)

release: $(VENV)/.installed helm syft  ## dist/VERSION/ (default: the tree's version): images, SBOMs, install.yaml, chart, SHA256SUMS, signatures (SIGNING_KEY=)
	$(PY) release/bundle.py $(VERSION) --registry $(REGISTRY) $(if $(SIGNING_KEY),--signing-key $(SIGNING_KEY)) \
	  $(if $(UNSIGNED),--unsigned) $(if $(ALLOW_DIRTY),--allow-dirty)

plugin:  ## the kubectl plugin alone, as one file (a zipapp) with its krew archive and manifest, in dist/VERSION/ (release/plugin.py)
	$(PYTHON) release/plugin.py

syft: $(SYFT)  ## build syft (each image's SBOM in make release) from the Go module proxy (cached)
$(SYFT): release/build-tool.sh e2e/go-build.sh
	bash release/build-tool.sh syft $(SYFT)

crds: $(VENV)/.installed  ## regenerate crds/ and charts/slipway-crds/files/ (charts/slipway/files/crds/ links to crds/) from the pydantic models, and the operator's RBAC from slipway.kinds
	$(PY) -m slipway.crdgen $(CRD_DIRS)
	$(PY) -m slipway.rbacgen

verify: lint types docs  ## lint, types, CRD and RBAC drift, the documentation site built strictly
	$(PY) -m slipway.crdgen --check $(CRD_DIRS)
	$(PY) -m slipway.rbacgen --check

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check operator e2e tests bench
	$(VENV)/bin/ruff format --check operator e2e tests bench

types: $(VENV)/.installed
	$(VENV)/bin/mypy

CLUSTER_TOOLS := controlplane prometheus metrics-server traefik health-tool promql-oracle helm kueue jobset keda gie
test: install mlflow-oldest-env $(CLUSTER_TOOLS) node image syft  ## all tests: lint, types and unit first, then the cluster tiers on local clusters (tests/suite.py)
	$(PY) tests/suite.py $(TEST_ARGS)

test-fast: install $(CLUSTER_TOOLS)  ## the inner loop: lint, types, unit, chart, plugin and health tests
	$(PY) tests/suite.py --fast $(TEST_ARGS)

test-faults: install controlplane prometheus metrics-server  ## the fault suite alone: faults injected into a lifecycle, with figures
	$(PY) -m pytest -q tests/faults

# The real-node phase: its own cluster (kubelet, kube-proxy, containerd, runc, CNI bridge) in
# .cache/cluster-realnode, started and stopped by the phase, running the images of dist/ (make image).
.PHONY: test-realnode
test-realnode: install controlplane prometheus metrics-server helm node image syft  ## the real-node phase alone: the release pulled from a registry, restricted pods, Services, the chart and training in containers
	$(PY) -m pytest -p no:xdist -q -m realnode tests/realnode

test-unit: $(VENV)/.installed promql-oracle  ## the unit phase alone: tests/unit/<package>/ and the harness's own tests (no cluster)
	$(PY) -m pytest -q tests/unit tests/harness --ignore=tests/harness/cluster

# RUNTIME=containerd: one real node (kubelet, kube-proxy, Debian's containerd, runc and CNI plugins;
# images from dist/, `make image`) instead of the node agents that run pods as processes.
RUNTIME ?= process
cluster-up: install controlplane prometheus metrics-server traefik helm $(if $(filter containerd,$(RUNTIME)),node)  ## start the local cluster, MLflow and Prometheus in the background (GATEWAY_API=1: and the gateway; RUNTIME=containerd: a real node)
	$(PY) -m localkube up --runtime $(RUNTIME) $(if $(GATEWAY_API),--gateway-api)

demo: install controlplane prometheus metrics-server  ## the whole lifecycle on the local cluster, live, with a summary
	$(PY) -m slipway_e2e.demo

demo-down: cluster-down  ## stop the demo's cluster

# Benchmarks, run by hand (never by `make test` or CI). `make bench` runs the four scenarios of
# bench/README.md (Slipway beside Argo Rollouts on one local cluster, then Slipway at scale on kwok
# nodes), keeps the raw JSON in bench/out/run-<time>/ and renders the run's page there; `python -m bench
# publish` keeps a run in bench/runs/, and bench/RESULTS.md is rendered from the kept runs alone.
.PHONY: bench bench-env bench-report argo-rollouts kwok
BENCH_ARGS ?=
bench: install bench-env controlplane prometheus metrics-server argo-rollouts kwok gie  ## Slipway vs Argo Rollouts, and Slipway at scale: bench/out/last/RESULTS.md
	$(PY) -m bench all $(BENCH_ARGS)

bench-report: bench-env  ## render bench/RESULTS.md and bench/plots/ again from the kept runs' raw JSON (bench/runs/)
	$(PY) -m bench report

bench-env: $(VENV)/.bench-installed
# The plots' matplotlib is not in the lock (by hand only, never in a test or an image): constraints.txt's
# versions constrain it, without its hashes (hashes would demand one for matplotlib too).
$(VENV)/.bench-installed: $(VENV)/.installed pyproject.toml
	sed -e '/^ *--hash=/d' -e 's/ *\\$$//' constraints.txt > $(CACHE)/bench-constraints.txt
	PYTHONWARNINGS='ignore:Editable installation' $(PY) -m pip install -q -c $(CACHE)/bench-constraints.txt -e '.[dev,workloads,docs,bench]'
	touch $@

argo-rollouts: $(ARGO_ROLLOUTS)  ## build the Argo Rollouts controller (the benchmarks' peer) from the Go module proxy (cached)
$(ARGO_ROLLOUTS): bench/build-argo-rollouts.sh e2e/go-build.sh
	bash bench/build-argo-rollouts.sh $(ARGO_ROLLOUTS)

kwok: $(KWOK)  ## build kwok (fake nodes for the scale benchmarks) from the Go module proxy (cached)
$(KWOK): bench/build-kwok.sh e2e/go-build.sh
	bash bench/build-kwok.sh $(KWOK)

e2e-kind:  ## the lifecycle on kind (needs Docker, kind, kubectl; not available on Slipway's CI machine)
	bash e2e/kind/run.sh

cluster-down:
	$(PY) -m localkube down

clean: cluster-down
	rm -rf .cluster
