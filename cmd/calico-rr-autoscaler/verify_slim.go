//go:build slim

package main

import (
	"errors"
	"io"
)

// runVerify: the slim build (the image's /calico-rr-autoscaler) has no verify command; it would
// link GoBGP, gRPC and the test environment into the binary that serves.
func runVerify([]string, io.Writer, io.Writer) error {
	return errors.New("verify: this binary is the slim build, without the verify command; run calico-rr-autoscaler-full (in the same image) or a build of cmd/calico-rr-autoscaler without -tags slim")
}
