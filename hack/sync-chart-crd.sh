#!/usr/bin/env bash
# Writes the generated RouteReflectorPolicy CRD (policy/crd, written by `make generate`) into the
# Helm chart as a template, templates/crds/, so that `helm upgrade` upgrades it (Helm never
# upgrades what sits in a chart's crds/ folder): rendered only with crds.enabled, with Helm's
# labels, and annotated helm.sh/resource-policy: keep (uninstall leaves it) with crds.keep.
# test/chart fails when the template is stale.
#
# Usage: hack/sync-chart-crd.sh [--check]
#   --check  exit 1 (and say so) when the chart's template is stale; write nothing.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$root/policy/crd/routereflector.io_routereflectorpolicies.yaml"
dst="$root/charts/calico-rr-autoscaler/templates/crds/routereflector.io_routereflectorpolicies.yaml"

# render prints the template: the guard, then src with Helm's labels and the keep annotation
# added to its metadata (controller-gen writes "metadata:" then "  annotations:").
render() {
  if grep -q '{{' "$src"; then
    echo "sync-chart-crd.sh: $src holds {{, which Helm would read as a template" >&2
    exit 1
  fi
  echo '{{- if .Values.crds.enabled }}'
  echo '# Generated from policy/crd by hack/sync-chart-crd.sh (make generate): do not edit.'
  awk '
    /^---$/ && !started { next }
    { started = 1 }
    /^metadata:$/ && !meta {
      print
      print "  labels:"
      print "    {{- include \"rra.labels\" . | nindent 4 }}"
      meta = 1; next
    }
    meta == 1 && /^  annotations:$/ {
      print
      print "    {{- if .Values.crds.keep }}"
      print "    helm.sh/resource-policy: keep"
      print "    {{- end }}"
      meta = 2; next
    }
    { print }
    END { if (meta != 2) { print "sync-chart-crd.sh: no metadata.annotations in the CRD" > "/dev/stderr"; exit 1 } }
  ' "$src"
  echo '{{- end }}'
}

if [[ "${1:-}" == "--check" ]]; then
  if ! cmp -s <(render) "$dst"; then
    echo "hack/sync-chart-crd.sh: $dst is stale; run hack/sync-chart-crd.sh" >&2
    exit 1
  fi
  exit 0
fi
mkdir -p "$(dirname "$dst")"
out="$(render)"
printf '%s\n' "$out" >"$dst"
echo "wrote $(basename "$src") into charts/calico-rr-autoscaler/templates/crds/"
