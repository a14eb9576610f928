#!/usr/bin/env bash
# The Slipway lifecycle on kind, for machines with Docker (it cannot run where
# there is no Docker engine, such as Slipway's own CI machine: there the same
# lifecycle runs on the local cluster, `make demo` and e2e/tests/).
#
#   bash e2e/kind/run.sh          # create the cluster, build and load the image, run the lifecycle
#   KEEP=1 bash e2e/kind/run.sh   # keep the cluster afterwards
#
# Needs: docker, kind, kubectl.
set -euo pipefail
cd "$(dirname "$0")/../.."
version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' operator/slipway/_version.py)
cluster=slipway
ns=demo

for tool in docker kind kubectl; do
  command -v "$tool" >/dev/null || { echo "run.sh: $tool is required" >&2; exit 1; }
done
kind get clusters | grep -qx "$cluster" || kind create cluster --config e2e/kind/kind-config.yaml
trap '[ "${KEEP:-}" = 1 ] || kind delete cluster --name "$cluster"' EXIT
kubectl config use-context "kind-$cluster"

# The two images manifests/ and samples/ name (slipway-operator, slipway-workloads), at the tree's
# version, from wheels built on the host (images/wheels.sh).
bash images/wheels.sh build/image
for kind in operator workloads; do
  image=ghcr.io/slipway-dev/slipway-$kind:$version
  docker build -f images/Dockerfile --build-arg WHEELS=$kind -t "$image" build/image
  kind load docker-image "$image" --name "$cluster"
done

kubectl apply -f e2e/kind/addons.yaml
kubectl -n mlflow rollout status deployment/mlflow --timeout=300s
kubectl -n monitoring rollout status deployment/prometheus --timeout=300s

# One pass: manifests/ holds no object of a kind whose CRD it creates.
kubectl apply -k e2e/kind
kubectl -n slipway-system rollout status deployment/slipway-operator --timeout=300s

kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f -
kubectl -n "$ns" apply -f samples/trainingrun-digits.yaml -f samples/inferencedeployment-digits.yaml
kubectl -n "$ns" wait --for=condition=Ready trainingrun/digits --timeout=600s
kubectl -n "$ns" wait --for=condition=Ready modelartifact/digits --timeout=600s
kubectl -n "$ns" wait --for=condition=Ready inferencedeployment/digits --timeout=600s
kubectl -n "$ns" get slipway
echo "kind e2e: the model serves in production"
