#!/usr/bin/env bash
# make demo: builds only what the demo runs (kube-apiserver, etcd, kubectl: no helm, the demo renders
# the chart with Helm's own code from the helm.sh/helm/v3 module; no confd, Calico API server, bird
# or promtool) while the product's modules download, then compiles the product and the demo
# against the same build cache as the tools (CGO_ENABLED=0 and -trimpath, as hack/tools.sh builds:
# the Kubernetes packages kube-apiserver compiled are not compiled again), says what took how
# long, and runs the demo with the product it compiled.
set -euo pipefail
cd "$(dirname "$0")/.."
GO="${GO:-go}"
start=$SECONDS
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
echo "demo: building kube-apiserver, etcd, kubectl (hack/tools.sh) while the product's modules download" >&2
"$GO" mod download > "$out/download.log" 2>&1 &
download=$!
hack/tools.sh kube-apiserver etcd kubectl
if ! wait "$download"; then
  cat "$out/download.log" >&2
  echo "demo: downloading the product's modules failed" >&2
  exit 1
fi
s=$SECONDS
CGO_ENABLED=0 "$GO" build -trimpath -o "$out/" ./cmd/calico-rr-autoscaler ./test/demo
echo "demo: product and demo compiled in $((SECONDS - s))s; ready to run after $((SECONDS - start))s" >&2
# shellcheck disable=SC1091
source "${RRA_CACHE:-$HOME/.cache/calico-rr-autoscaler}/bin/env.sh"
RRA_PRODUCT_BIN="$out/calico-rr-autoscaler" "$out/demo" "$@"
echo "demo: done in $((SECONDS - start))s" >&2
