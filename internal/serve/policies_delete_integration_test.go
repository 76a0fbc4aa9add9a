package serve_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/uninstall"
)

// TestPoliciesDeletionOnRealAPIServer: two or three policies over node pools, migrateFromNodeMesh on
// for one, two or all of them, deleted in every order, one by one or all at once through
// `calico-rr-autoscaler uninstall` (the chart's pre-delete hook). Every case ends with the mesh back
// on and no owned label, annotation or BGPPeer left, and the cluster's own nodes and BGPPeers fed to
// the graph model (with the mesh as the BGPConfiguration says) lose no pair at any moment sampled
// during the deletion. It used to leave a pool's roles and BGPPeers behind for good when the policy
// that had not turned the mesh off ran its cleanup while the mesh was still off. Each case starts
// its own API server: what it proves is the order of real finalizers and reconciles, which a faster
// fake could not show.
func TestPoliciesDeletionOnRealAPIServer(t *testing.T) {
	t.Parallel() // its own API server and product: beside the other live tests, mostly waiting
	policiesDeletion(t, []deletionCase{
		{"two, both migrate, all at once", "ab", "ab", nil, "", false},
		{"two, a migrates, b then a", "ab", "a", []string{"b", "a"}, "", false},
		{"two, both migrate, a deleted while b is created, then b", "ab", "ab", []string{"a", "b"}, "b", false},
	})
}

// TestPoliciesDeletionOnRealAPIServerLarge: the other orders and three policies (make test-all).
// make test keeps one case of each kind: all at once, one by one with the policy that turned the
// mesh off deleted last, and a policy created during a deletion.
func TestPoliciesDeletionOnRealAPIServerLarge(t *testing.T) {
	testenv.SlowProof(t)
	policiesDeletion(t, []deletionCase{
		{"two, both migrate, a then b", "ab", "ab", []string{"a", "b"}, "", false},
		{"two, both migrate, b then a", "ab", "ab", []string{"b", "a"}, "", false},
		{"two, a migrates, a then b", "ab", "a", []string{"a", "b"}, "", false},
		{"three, all migrate, all at once", "abc", "abc", nil, "", false},
		{"three, two migrate, c b a", "abc", "ab", []string{"c", "b", "a"}, "", false},
		{"three, one migrates, b a c", "abc", "c", []string{"b", "a", "c"}, "", false},
		{"two, a migrates, all at once", "ab", "a", nil, "", true},
		{"three, all migrate, a b c", "abc", "abc", []string{"a", "b", "c"}, "", false},
		{"three, one migrates, all at once", "abc", "b", nil, "", false},
		{"three, two migrate, a c b", "abc", "bc", []string{"a", "c", "b"}, "", false},
		{"three, all migrate, b c a", "abc", "abc", []string{"b", "c", "a"}, "", false},
		{"three, two migrate, c a b", "abc", "ac", []string{"c", "a", "b"}, "", false},
	})
}

type deletionCase struct {
	name    string
	pools   string // one letter per policy
	migrate string // the pools with migrateFromNodeMesh
	order   []string
	// late are pools whose policy is created only as the first deletion starts (their nodes join
	// with the others, in no policy until then); order deletes it later.
	late string
	// verify runs confd + BIRD on the cluster at the end (checkRouting: about a minute).
	verify bool
}

func policiesDeletion(t *testing.T, cases []deletionCase) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			w.applyPoolPolicies(strings.Map(func(r rune) rune {
				if strings.ContainsRune(tc.late, r) {
					return -1
				}
				return r
			}, tc.pools), tc.migrate)
			w.joinPools(tc.pools, 12*len(tc.pools), 0)
			w.eventually("mesh off (on with a late policy) and every pool routed", 90*time.Second, func() error {
				// With a late policy its nodes are in no policy yet: the mesh stays on for them.
				on, err := w.meshEnabled()
				if (on && tc.late == "") || (err != nil && !on) {
					return fmt.Errorf("mesh on (%v)", err)
				}
				if missing, _, _, err := w.routingStateWith(bgpmodel.Options{NodeToNodeMesh: on}); err != nil || missing > 0 {
					return fmt.Errorf("%d missing pairs (%v)", missing, err)
				}
				return nil
			})
			// The routes while the policies go: sampled every 100 ms with the mesh as it is.
			check := func() {
				t.Helper()
				on, _ := w.meshEnabled()
				missing, _, _, err := w.routingStateWith(bgpmodel.Options{NodeToNodeMesh: on})
				require.NoError(t, err)
				require.Zerof(t, missing, "missing pairs with the mesh %v: %s", map[bool]string{true: "on", false: "off"}[on], w.snapshot().roles())
			}
			waitGone := func(done func() bool) {
				t.Helper()
				for end := time.Now().Add(90 * time.Second); !done(); time.Sleep(100 * time.Millisecond) {
					require.True(t, time.Now().Before(end), "deletion did not end in 90 s: %s", w.snapshot().roles())
					check()
				}
			}
			if tc.order == nil {
				var out bytes.Buffer
				errc := make(chan error, 1)
				go func() { errc <- uninstall.Run(t.Context(), w.env.ConfigFor(testenv.UserAdmin), 90*time.Second, &out) }()
				var err error
				waitGone(func() bool {
					select {
					case err = <-errc:
						return true
					default:
						return false
					}
				})
				require.NoError(t, err, out.String())
			} else {
				for i, pool := range tc.order {
					_, stderr, err := w.kubectl(testenv.UserAdmin, "delete", "rrp", "pool-"+pool, "--wait=false")
					require.NoError(t, err, stderr)
					if i == 0 && tc.late != "" {
						w.applyPoolPolicies(tc.late, tc.migrate)
					}
					waitGone(func() bool {
						_, err := w.policyPath("pool-"+pool, "{.metadata.name}")
						return apierrors.IsNotFound(err)
					})
				}
			}
			on, err := w.meshEnabled() // no BGPConfiguration (never turned off) reads as on, Calico's default
			require.True(t, on, "the mesh is back on (%v)", err)
			s := w.snapshot()
			for name, n := range s.nodes {
				for _, pool := range tc.pools {
					for _, k := range extender.OwnedLabelKeys("rr-" + string(pool)) {
						require.NotContains(t, n.Labels, k, "%s keeps label %s", name, k)
					}
				}
				for _, k := range extender.OwnedAnnotationKeys() {
					require.NotContains(t, n.Annotations, k, "%s keeps annotation %s", name, k)
				}
			}
			require.Emptyf(t, s.peers, "BGPPeers left: %v", s.peers)
			if tc.verify {
				w.checkRouting(t, "after every policy is deleted")
			}
			missing, _, _, err := w.routingStateWith(bgpmodel.Options{NodeToNodeMesh: true})
			require.NoError(t, err)
			require.Zero(t, missing)
		})
	}
}
