package sessions

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPlanNodeStatuses(t *testing.T) {
	for _, tc := range []struct {
		name        string
		want, have  []string
		create, del []string
		bound       int
	}{
		{name: "none", bound: 3},
		{name: "fill up to the bound in name order", want: []string{"e", "d", "c", "b", "a"}, bound: 3, create: []string{"a", "b", "c"}},
		{name: "present ones stay, new ones fill", want: []string{"a", "b", "c", "d", "e"}, have: []string{"d"}, bound: 3, create: []string{"a", "b"}},
		{name: "done ones go first", want: []string{"c", "d"}, have: []string{"a", "b", "c"}, bound: 3, create: []string{"d"}, del: []string{"a", "b"}},
		{name: "over the bound (another writer): extras go", want: []string{"a", "b", "c", "d"}, have: []string{"a", "b", "c", "d"}, bound: 3, del: []string{"d"}},
		{name: "handover ended", have: []string{"x"}, bound: 3, del: []string{"x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			create, del := Plan(tc.want, tc.have, tc.bound)
			require.Equal(t, fmt.Sprint(tc.create), fmt.Sprint(create), "create")
			require.Equal(t, fmt.Sprint(tc.del), fmt.Sprint(del), "del")
			if n := len(tc.have) - len(del) + len(create); n > tc.bound {
				require.Fail(t, fmt.Sprintf("%d objects after the change", n))
			}
		})
	}
}
