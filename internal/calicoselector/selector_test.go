package calicoselector

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCalicoSyntax(t *testing.T) {
	labels := map[string]string{"routereflector.io/rr-id": "node-1", "routereflector.io/peering-set": "abc", "calico-route-reflector": ""}
	for sel, want := range map[string]bool{
		"":                                       true,
		"all()":                                  true,
		"has(calico-route-reflector)":            true,
		"!has(calico-route-reflector)":           false,
		"calico-route-reflector == ''":           true,
		"routereflector.io/peering-set == 'abc'": true,
		"routereflector.io/rr-id in {'node-2', 'node-1'}":                     true,
		"routereflector.io/rr-id in {'node-2'}":                               false,
		"has(calico-route-reflector) && routereflector.io/peering-set == 'x'": false,
		"has(calico-route-reflector) || routereflector.io/peering-set == 'x'": true,
	} {
		s, err := Parse(sel)
		require.NoError(t, err, "%q", sel)
		assert.Equal(t, want, s.Matches(labels), "%q matches", sel)
	}
	for _, bad := range []string{"has(", "a = 'b'", "a in {b}", strings.Repeat("a", MaxLength+1)} {
		_, err := Parse(bad)
		assert.Error(t, err, "%q parsed", bad)
	}
}

func TestKeysIn(t *testing.T) {
	s, _ := Parse("has(a) && b == 'x'")
	got := KeysIn([]string{"a", "b", "c", "zone"}, s, nil)
	assert.Equal(t, "a,b", strings.Join(got, ","), "KeysIn = %v", got)
}
