#!/usr/bin/env bash
# make demo: builds only what the demo runs (kube-apiserver, etcd, kubectl, helm; no confd, Calico
# API server, bird or promtool) and, at the same time, compiles the product and the demo (on a
# fresh machine the tool builds spend much of their time fetching modules, which the compile
# fills); says what took how long, then runs the demo with the product it compiled.
set -euo pipefail
cd "$(dirname "$0")/.."
GO="${GO:-go}"
start=$SECONDS
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
echo "demo: building kube-apiserver, etcd, kubectl, helm (hack/tools.sh) and, alongside, the product and the demo" >&2
(
  s=$SECONDS
  "$GO" build -trimpath -o "$out/" ./cmd/calico-rr-autoscaler ./test/demo > "$out/build.log" 2>&1 || exit 1
  echo "demo: product and demo compiled in $((SECONDS - s))s" >&2
) &
build=$!
hack/tools.sh kube-apiserver etcd kubectl helm
if ! wait "$build"; then
  cat "$out/build.log" >&2
  echo "demo: compiling the product and the demo failed" >&2
  exit 1
fi
echo "demo: ready to run after $((SECONDS - start))s" >&2
# shellcheck disable=SC1091
source "${RRA_CACHE:-$HOME/.cache/calico-rr-autoscaler}/bin/env.sh"
RRA_PRODUCT_BIN="$out/calico-rr-autoscaler" "$out/demo" "$@"
echo "demo: done in $((SECONDS - start))s" >&2
