#!/usr/bin/env bash
# Copies the generated RouteReflectorPolicy CRD (policy/crd, written by
# `make generate`) into the Helm chart. test/chart fails when the two differ.
#
# Usage: hack/sync-chart-crd.sh [--check]
#   --check  exit 1 (and say so) when the chart's copy is stale; copy nothing.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$root/policy/crd/routereflector.io_routereflectorpolicies.yaml"
dst="$root/charts/calico-rr-autoscaler/crds/routereflector.io_routereflectorpolicies.yaml"
if [[ "${1:-}" == "--check" ]]; then
  if ! cmp -s "$src" "$dst"; then
    echo "hack/sync-chart-crd.sh: $dst is stale; run hack/sync-chart-crd.sh" >&2
    exit 1
  fi
  exit 0
fi
mkdir -p "$(dirname "$dst")"
cp "$src" "$dst"
echo "copied $(basename "$src") into charts/calico-rr-autoscaler/crds/"
