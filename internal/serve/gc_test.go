package serve

import (
	"os"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTuneGC: without GOGC the serve process collects at DefaultGOGC; with GOGC set, its value
// stands.
func TestTuneGC(t *testing.T) {
	prev := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(prev) })
	for _, tc := range []struct {
		name  string
		env   *string
		start int
		want  int
	}{
		{name: "unset", start: 100, want: DefaultGOGC},
		{name: "set", env: ptrTo("200"), start: 200, want: 200},
		{name: "off", env: ptrTo("off"), start: -1, want: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != nil {
				t.Setenv(EnvGOGC, *tc.env)
			} else {
				t.Setenv(EnvGOGC, "") // restored when the test ends
				require.NoError(t, os.Unsetenv(EnvGOGC))
			}
			debug.SetGCPercent(tc.start) // as the runtime read the variable at start
			require.Equal(t, tc.want, TuneGC())
			require.Equal(t, tc.want, debug.SetGCPercent(tc.want))
		})
	}
}

func ptrTo[T any](v T) *T { return &v }
