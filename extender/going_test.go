package extender

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv/nodetest"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

func goingPolicy(t *testing.T, topology v1alpha1.TopologyType) *policy.Resolved {
	return resolve(t, v1alpha1.RouteReflectorPolicySpec{Topology: &v1alpha1.Topology{Type: topology},
		GoingSignals: &v1alpha1.GoingSignals{Taints: []v1alpha1.NodeMark{{Key: nodetest.GoingPolicyTaint}}, Labels: []v1alpha1.NodeMark{{Key: nodetest.GoingPolicyLabel, Value: "retiring"}}}})
}

// TestGoingDrainsLikeACordon: each going signal on a route reflector of a settled plan starts its
// handover in the next plan exactly as a cordon does (draining since the plan's time, no client on
// it, a replacement active), names its cause in the plan's ineligible list, and the mutating
// webhook's one admission of the node marks it draining with the same reason. The graceful node
// shutdown does so inside notReadyGracePeriod, where a plain NotReady keeps the role.
func TestGoingDrainsLikeACordon(t *testing.T) {
	now := t0.Add(24 * time.Hour)
	for _, topo := range []v1alpha1.TopologyType{v1alpha1.DualPlane, v1alpha1.MultiCluster} {
		p := goingPolicy(t, topo)
		for _, sig := range nodetest.GoingSignals(now) {
			t.Run(string(topo)+"/"+sig.Name, func(t *testing.T) {
				nodes := cluster(30, 3)
				first := Plan(Input{Policy: p, Nodes: nodes, Now: now})
				apply(p, nodes, first)
				victim := first.RouteReflectors[0].Node
				var n *Node
				for _, x := range nodes {
					if x.Name == victim {
						n = x
					}
				}
				before := first.RouteReflectors
				with(n, sig.Opt)

				// The webhook's admission of the change.
				in := Input{Policy: p, Nodes: nodes, Now: now}
				ans := AdmitNodeRequest(p, AdmitRequest{Node: n, Now: now, State: NewAdmitState(in, first)})
				require.Equal(t, AdmitDrain, ans.Action, "%+v", ans)
				require.Contains(t, ans.DrainReason, sig.Reason)
				require.NotNil(t, ans.Annotations[AnnotationDrainingSince])
				assert.Nil(t, ans.Annotations[AnnotationDrainingReason], "a going node does not take its role back")

				// The full plan.
				r := Plan(in)
				rr := rrNames(r)[victim]
				require.True(t, rr.Draining, "%s keeps its role undrained: %+v", victim, rr)
				assert.Zero(t, rr.Clients, "%s still serves clients", victim)
				for _, c := range r.Clients {
					require.NotContains(t, c.RouteReflectors, victim, "client %s", c.Node)
				}
				var st NodeState
				for _, s := range r.Nodes {
					if s.Name == victim {
						st = s
					}
				}
				assert.Equal(t, now.UTC().Format(time.RFC3339), st.Annotations[AnnotationDrainingSince])
				var in2 Ineligible
				for _, x := range r.Ineligible {
					if x.Node == victim {
						in2 = x
					}
				}
				assert.Equal(t, sig.Rule, in2.Rule)
				assert.Contains(t, in2.Reason, sig.Reason)
				assert.Equal(t, len(before), r.Summary.RouteReflectors, "a replacement for %s", victim)
			})
		}
	}
	t.Run("NotReady alone keeps the role inside the grace", func(t *testing.T) {
		p := goingPolicy(t, v1alpha1.DualPlane)
		nodes := cluster(30, 3)
		first := Plan(Input{Policy: p, Nodes: nodes, Now: now})
		apply(p, nodes, first)
		victim := first.RouteReflectors[0].Node
		for _, n := range nodes {
			if n.Name == victim {
				with(n, nodetest.NotReadySince(now.Add(-5*time.Second)))
			}
		}
		require.False(t, rrNames(Plan(Input{Policy: p, Nodes: nodes, Now: now}))[victim].Draining)
	})
}

// TestGoingCause: what is and is not a going signal.
func TestGoingCause(t *testing.T) {
	p := goingPolicy(t, v1alpha1.DualPlane)
	for _, tc := range []struct {
		name string
		opts []nodeOpt
		want string // "" when not going, else a substring of the cause
	}{
		{"plain node", nil, ""},
		{"cordon is NodeUnschedulable's", []nodeOpt{cordoned}, ""},
		{"deletion candidate only scores down", []nodeOpt{taint(corev1.Taint{Key: policy.TaintDeletionCandidateOfClusterAutoscaler, Effect: corev1.TaintEffectPreferNoSchedule})}, ""},
		{"pre-v1 key with another value", []nodeOpt{label(policy.KeyKarpenterDisruption, "other")}, ""},
		{"the policy's label with another value", []nodeOpt{label("lifecycle", "stable")}, ""},
		{"NotReady for another reason", []nodeOpt{func(n *corev1.Node) {
			nodetest.NotReady(n)
			n.Status.Conditions[0].Reason, n.Status.Conditions[0].Message = ReadyReasonKubeletNotReady, "container runtime is down"
		}}, ""},
		{"shutdown among other errors, with a warning", []nodeOpt{func(n *corev1.Node) {
			nodetest.ShuttingDown(t0)(n)
			n.Status.Conditions[0].Message = "[container runtime is down, node is shutting down]. WARNING: cpu limits"
		}}, "graceful node shutdown"},
		{"the first signal wins", []nodeOpt{label("lifecycle", "retiring"), taint(corev1.Taint{Key: policy.TaintKarpenterDisrupted})}, "karpenter.sh/disrupted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := GoingCause(p, node("n", "a", 0, tc.opts...))
			if tc.want == "" {
				assert.Empty(t, got)
				return
			}
			assert.Contains(t, got, tc.want)
			assert.True(t, strings.HasPrefix(got, "node is going: "), got)
		})
	}
}

// TestSlimConditionsKeepTheShutdown: the cache's and the webhooks' stripped conditions keep what
// says a graceful node shutdown (as constants) and nothing else of a reason or message.
func TestSlimConditionsKeepTheShutdown(t *testing.T) {
	down := nodetest.New("n", nodetest.ShuttingDown(t0))
	down.Status.Conditions[0].Message = "[a, node is shutting down]"
	got := SlimConditions(down.Status.Conditions)
	require.Len(t, got, 1)
	assert.Equal(t, MessageNodeShuttingDown, got[0].Message)
	assert.True(t, NodeShuttingDown(&Node{Status: NodeStatus{Conditions: got}}))

	other := nodetest.New("n", nodetest.NotReady)
	other.Status.Conditions[0].Reason, other.Status.Conditions[0].Message = ReadyReasonKubeletNotReady, "PLEG is not healthy"
	got = SlimConditions(other.Status.Conditions)
	assert.Empty(t, got[0].Reason)
	assert.Empty(t, got[0].Message)
}
