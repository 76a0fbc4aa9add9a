package extender

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestApplyOwned(t *testing.T) {
	for _, tc := range []struct {
		name      string
		base, set map[string]string
		owned     []string
		want      map[string]string
	}{
		{name: "owned keys the plan does not set go", base: map[string]string{"zone": "a", "rr": "", "peering-set": "x"},
			owned: []string{"rr", "peering-set"}, set: map[string]string{"peering-set": "y"},
			want: map[string]string{"zone": "a", "peering-set": "y"}},
		{name: "a key the product does not own stays", base: map[string]string{"zone": "a"}, owned: []string{"rr"},
			want: map[string]string{"zone": "a"}},
		{name: "the plan's value wins, also over an unowned key", base: map[string]string{"k": "old"}, set: map[string]string{"k": "new"},
			want: map[string]string{"k": "new"}},
		{name: "nil base", owned: []string{"rr"}, set: map[string]string{"rr": ""}, want: map[string]string{"rr": ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := map[string]string{}
			for k, v := range tc.base {
				before[k] = v
			}
			assert.Equal(t, tc.want, ApplyOwned(tc.base, tc.owned, tc.set))
			assert.Equal(t, len(before), len(tc.base), "base is not changed")
			for k, v := range before {
				assert.Equal(t, v, tc.base[k], "base[%s] is not changed", k)
			}
		})
	}
}
