// Package crd holds the RouteReflectorPolicy CustomResourceDefinition that `make generate`
// (controller-gen) writes from policy/v1alpha1, embedded so the binary carries the CRD of its own
// types: `calico-rr-autoscaler crds apply` (internal/crds) applies it, and the Helm chart's
// pre-upgrade hook runs that command. The chart's crds/ folder holds a byte-for-byte copy.
package crd

import _ "embed"

// File is the name of the CRD's file in this folder and in the chart's crds/.
const File = "routereflector.io_routereflectorpolicies.yaml"

// YAML is the CRD as controller-gen wrote it.
//
//go:embed routereflector.io_routereflectorpolicies.yaml
var YAML []byte
