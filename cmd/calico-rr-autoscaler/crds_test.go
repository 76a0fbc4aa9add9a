package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCRDsFlags: `crds` wants the apply subcommand; bad flags are usage errors (exit 2) before any
// connection; -h prints the usage. internal/crds tests the apply on a real API server, test/chart
// the chart's hook that runs it.
func TestCRDsFlags(t *testing.T) {
	var out bytes.Buffer
	for _, args := range [][]string{nil, {"print"}, {"apply", "--timeout=0s"}, {"apply", "extra"}, {"apply", "--nope"}} {
		err := runCRDs(args, &out)
		require.IsType(t, usageError{}, err, "%v", args)
		require.Equal(t, 2, exitCode(err))
	}
	for _, args := range [][]string{{"-h"}, {"apply", "-h"}} {
		out.Reset()
		require.Equal(t, errHelp, runCRDs(args, &out))
		require.Contains(t, out.String(), "crds apply", "%v", args)
	}
	require.Contains(t, out.String(), "-timeout")
	require.Equal(t, 2, run([]string{"crds"}))
}
