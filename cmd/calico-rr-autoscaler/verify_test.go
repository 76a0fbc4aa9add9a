package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestVerifyBadInputExitsTwoOnOneLine(t *testing.T) {
	for _, args := range [][]string{
		{"--simulate", "5", "--speaker", "quagga"},
		{"--simulate", "5", "-o", "yaml"},
		{"--simulate", "400"},
		{"--simulate", "20", "--fail-rr", "no-such-node"},
		{"--simulate", "20", "--fail-rr", "99"},
		{"--simulate", "20", "--fail-zone", "zone-x"},
		{"--simulate", "20", "--max-nodes", "-1"},
		{"--simulate", "20", "extra"},
		{},
	} {
		var out, errb bytes.Buffer
		err := runVerify(args, &out, &errb)
		if code := exitCode(err); code != 2 {
			assert.Fail(t, fmt.Sprintf("verify %v: exit %d (%v), want 2", args, code, err))
			continue
		}
		if msg := err.Error(); strings.Contains(msg, "\n") || msg == "" {
			assert.Fail(t, fmt.Sprintf("verify %v: message %q is not one line", args, msg))
		}
	}
}

func TestVerifyGoBGPJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("real BGP speakers (port 179 on 127.x addresses) run without -short")
	}
	var out, errb bytes.Buffer
	err := runVerify([]string{"--simulate", "15", "--speaker", "gobgp", "--fail-zone", "zone-c", "-o", "json"}, &out, &errb)
	if err != nil {
		require.Fail(t, fmt.Sprintf("verify: %v\n%s", err, errb.String()))
	}
	var rep struct {
		Summary      map[string]any `json:"summary"`
		Nodes        []map[string]any
		AfterFailure struct {
			Down    []string       `json:"down"`
			Summary map[string]any `json:"summary"`
		} `json:"afterFailure"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep))
	for _, k := range []string{"nodes", "sessions", "establishedSessions", "missingPairs", "convergedSeconds", "maxRoutesPerNode"} {
		if _, ok := rep.Summary[k]; !ok {
			assert.Fail(t, fmt.Sprintf("summary has no %q: %v", k, rep.Summary))
		}
	}
	assert.EqualValues(t, 15, rep.Summary["nodes"], "summary: %v", rep.Summary)
	assert.EqualValues(t, 0, rep.Summary["missingPairs"], "summary: %v", rep.Summary)
	assert.Equal(t, rep.Summary["sessions"], rep.Summary["establishedSessions"], "summary: %v", rep.Summary)
	assert.Len(t, rep.AfterFailure.Down, 5, "after failure: %+v", rep.AfterFailure)
	assert.EqualValues(t, 0, rep.AfterFailure.Summary["missingPairs"], "after failure: %+v", rep.AfterFailure)
}
