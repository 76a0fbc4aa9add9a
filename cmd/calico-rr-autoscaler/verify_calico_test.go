package main

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestVerifyCalicoBadInputExitsTwo(t *testing.T) {
	for _, args := range [][]string{
		{"--kubeconfig", "/nonexistent", "--simulate", "5"},
		{"--kubeconfig", "/nonexistent", "--policy", "p.yaml"},
		{"--kubeconfig", "/nonexistent/kubeconfig"},
		{"--simulate", "5", "--speaker", "frr"},
	} {
		var out, errb bytes.Buffer
		err := runVerify(args, &out, &errb)
		if code := exitCode(err); code != 2 {
			assert.Fail(t, fmt.Sprintf("verify %v: exit %d (%v), want 2", args, code, err))
		}
	}
}
