package bgpverify

// Replaying a transition (verify --from): the cluster as it is (its Nodes and BGPPeers) runs on
// the calico speaker, kept in sync the way calico-node keeps a node (Lab.Follow), then the plan is
// written over it in place, as the product's reconciler writes it, and every node's routes and
// BGP sessions are sampled while confd renders the change and the BIRDs load it.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/projectcalico/api/pkg/lib/numorstring"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calico"
)

// SampleInterval is how often a replayed transition reads every node's routes and sessions.
const SampleInterval = 200 * time.Millisecond

// followPause is the Lab's follow loop pause: how soon a BIRD loads what confd rendered.
const followPause = 100 * time.Millisecond

// renderQuiet is how long no BIRD may have been reconfigured for the plan's change to count as
// rendered and loaded everywhere (confd's watch renders within a second of a write).
const renderQuiet = 3 * time.Second

// TransitionReport is a replayed transition: the figures measured on BIRD while the plan was
// applied, beside the graph model's for the same change (bgpmodel.NewTransition).
type TransitionReport struct {
	// Dead are the nodes NotReady in the state given: their BIRD does not run in either state.
	Dead []string `json:"dead,omitempty"`
	// Before is the convergence of the cluster as it is (the report's summary is the plan's,
	// after the transition).
	Before Summary `json:"before"`
	// Measured: what the BIRDs did from the plan's first write until they converged on it.
	Measured MeasuredTransition `json:"measured"`
	// Model is the graph model's transition between the same two states.
	Model *bgpmodel.Transition `json:"model"`
}

// MeasuredTransition are the figures a Sampler took over a replayed transition.
type MeasuredTransition struct {
	IntervalSeconds float64 `json:"intervalSeconds"`
	DurationSeconds float64 `json:"durationSeconds"`
	Samples         int     `json:"samples"`
	// MissingPairSamples: over the samples, the (node, other node's block) pairs routed before and
	// missing in that sample, both BIRDs running; MissingPairs: the distinct pairs among them.
	MissingPairSamples int `json:"missingPairSamples"`
	MissingPairs       int `json:"missingPairs"`
	// The same between nodes that keep their role (the same cluster ID, or none, in both states).
	MissingPairSamplesKeepingRole int      `json:"missingPairSamplesKeepingRole"`
	MissingKeepingRole            []string `json:"missingKeepingRole,omitempty"` // up to 20, "node->origin(samples)"
	LongestGapSeconds             float64  `json:"longestGapSeconds"`
	LongestGapPair                string   `json:"longestGapPair,omitempty"`
	// SessionsRestarted: sessions seen Established that went down while both BIRDs ran, counted
	// at each end, that an end's configuration still has once the plan is loaded; RestartsByNode
	// the same per node, most first. SessionsRemoved: those neither end's has (the plan removed
	// them).
	SessionsRestarted int                  `json:"sessionsRestarted"`
	SessionsRemoved   int                  `json:"sessionsRemoved,omitempty"`
	RestartsByNode    []bgpmodel.NodeCount `json:"restartsByNode,omitempty"`
	Restarted         []string             `json:"restarted,omitempty"` // up to 40, "node->peer@seconds(reason)"
	// Configures: the `birdc configure`s the follow loop gave; ChangedProtocols per node the BGP
	// protocols whose configuration changed (BIRD restarts those).
	Configures       int                  `json:"configures"`
	ChangedProtocols []bgpmodel.NodeCount `json:"changedProtocols,omitempty"`
	// RoutesAtStart: the busiest node's routes in the first sample; PeakRoutes: the most any node
	// held in any sample, on PeakNode.
	RoutesAtStart int    `json:"routesAtStart"`
	PeakRoutes    int    `json:"peakRoutes"`
	PeakNode      string `json:"peakNode,omitempty"`
}

// ReplayTransition runs the cluster as it is (nodes with their labels and annotations, peers) on
// the calico speaker, applies the plan res (computed from in, whose nodes are the same) the way
// the product and calico-node do, and measures the transition every SampleInterval. Nodes that
// are not Ready in in.Nodes are dead in both states (their BIRD never runs). The returned report's
// summary and nodes are the plan's after the transition; Transition has the figures.
func ReplayTransition(ctx context.Context, in extender.Input, res *extender.Result, peers []apiv3.BGPPeer, opts Options) (*Report, error) {
	if opts.Speaker != SpeakerCalico {
		return nil, inputErr("--from needs --speaker calico (a transition is replayed by confd re-rendering a running BIRD per node)")
	}
	if opts.FailZone != "" || len(opts.FailRR) > 0 {
		return nil, inputErr("--from replays a transition: its failures are the nodes NotReady in the state, not --fail-zone or --fail-rr")
	}
	opts, err := prepare(opts, len(res.Nodes))
	if err != nil {
		return nil, err
	}
	mopts := bgpmodel.Options{NodeToNodeMesh: opts.NodeToNodeMesh}
	after, err := bgpmodel.FromPlan(in, res, mopts)
	if err != nil {
		return nil, InputError{fmt.Errorf("the plan: %w", err)}
	}
	// The state before, its nodes in the plan's order: node i is node i of the Lab in both.
	byName := map[string]*extender.Node{}
	for _, n := range in.Nodes {
		if n != nil {
			byName[n.Name] = n
		}
	}
	if len(byName) != len(after.Nodes) {
		return nil, inputErr("the plan has %d nodes, the state %d", len(after.Nodes), len(byName))
	}
	ordered := make([]*extender.Node, len(after.Nodes))
	names := make([]string, len(after.Nodes))
	var dead []string
	down := map[string]bool{}
	mask := make([]bool, len(after.Nodes))
	for i, nd := range after.Nodes {
		n := byName[nd.Name]
		if n == nil {
			return nil, inputErr("the plan's node %s is not in the state", nd.Name)
		}
		ordered[i], names[i] = n, nd.Name
		if !extender.IsReady(n) {
			dead, down[n.Name], mask[i] = append(dead, n.Name), true, true
		}
	}
	if len(dead) == len(names) {
		return nil, inputErr("every node of the state is NotReady")
	}
	zoneLabel := corev1.LabelTopologyZone
	if in.Policy != nil && in.Policy.ZoneLabel != "" {
		zoneLabel = in.Policy.ZoneLabel
	}
	before, err := bgpmodel.FromCluster(ordered, peers, zoneLabel, mopts)
	if err != nil {
		return nil, InputError{fmt.Errorf("the state: %w", err)}
	}
	model, err := bgpmodel.NewTransition(before, after, down)
	if err != nil {
		return nil, fmt.Errorf("the graph model's transition: %w", err)
	}
	stBefore, err := clusterState(ordered, peers, before, opts)
	if err != nil {
		return nil, err
	}
	stAfter, err := planState(in, res, after, opts)
	if err != nil {
		return nil, err
	}

	logv := func(format string, a ...any) { logf(opts, format, a...) }
	scratch := opts.Scratch
	if scratch == nil {
		t := time.Now()
		if scratch, err = StartScratch(ctx); err != nil {
			return nil, err
		}
		defer scratch.Close()
		logv("started a kube-apiserver with Calico's CRDs for confd in %v", time.Since(t).Round(time.Millisecond))
	}
	if err := scratch.write(ctx, stBefore); err != nil {
		return nil, err
	}
	// The passwords of both states' BGPPeers exist from the start: a Secret the plan names is
	// there before confd reads it, and a key both states name keeps its password.
	if err := scratch.writeSecrets(ctx, slices.Concat(stBefore.peers, stAfter.peers)); err != nil {
		return nil, err
	}
	lab, err := startLab(scratch.kubeconfig, names, opts.Confd, opts.BIRD)
	if err != nil {
		return nil, err
	}
	defer lab.Close()
	for _, n := range dead {
		lab.Kill(n)
	}
	start := time.Now()
	if err := lab.Sync(ctx); err != nil {
		return nil, fmt.Errorf("the state before: %w", err)
	}
	stop, err := lab.Follow(ctx, followPause)
	if err != nil {
		return nil, err
	}
	defer func() { _ = stop() }()
	topoBefore, _, diffsBefore, err := confdTopology(stBefore, lab.dirs)
	if err != nil {
		return nil, err
	}
	addrs := make([]netip.Addr, len(names))
	for i := range names {
		addrs[i] = NodeAddress(i).Addr()
	}
	nodesBefore := speakerNodesAt(topoBefore, addrs, stBefore.blocks)
	logv("the state before: %d BIRDs (%d dead), %d sessions rendered by confd", len(names)-len(dead), len(dead), topoBefore.SessionCount(mask))
	phBefore, err := converge(ctx, lab.f, topoBefore, nodesBefore, mask, start, opts)
	if err != nil {
		return nil, fmt.Errorf("the state before: %w", err)
	}
	if err := modelFigures(phBefore, before, topoBefore, mask); err != nil {
		return nil, err
	}
	if !phBefore.Summary.Converged {
		return nil, fmt.Errorf("the state before did not converge within %v: %d node pairs missing", opts.Timeout, phBefore.Summary.MissingPairs)
	}

	// The transition: sample, write the plan, wait until the BIRDs loaded it and converged.
	s := lab.StartSampler(ctx, SampleInterval)
	defer s.Stop()
	time.Sleep(3 * SampleInterval) // the sampler has seen every routed pair
	s.Begin("the plan applied")
	applied := time.Now()
	if err := scratch.apply(ctx, stAfter); err != nil {
		return nil, fmt.Errorf("writing the plan: %w", err)
	}
	logv("wrote the plan over the state in %v", time.Since(applied).Round(time.Millisecond))
	if err := awaitRendered(ctx, lab, applied, opts.Timeout); err != nil {
		return nil, err
	}
	if err := lab.FollowErr(); err != nil {
		return nil, fmt.Errorf("the confd/BIRD follow loop: %w", err)
	}
	topoAfter, protos, diffsAfter, err := confdTopology(stAfter, lab.dirs)
	if err != nil {
		return nil, err
	}
	nodesAfter := speakerNodesAt(topoAfter, addrs, stAfter.blocks)
	phAfter, err := converge(ctx, lab.f, topoAfter, nodesAfter, mask, applied, opts)
	if err != nil {
		return nil, fmt.Errorf("the plan: %w", err)
	}
	if err := modelFigures(phAfter, after, topoAfter, mask); err != nil {
		return nil, err
	}
	f := s.End()
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("sampling: %w", err)
	}

	rep := &Report{Speaker: SpeakerCalico, Policy: res.Policy, Summary: phAfter.Summary, Nodes: phAfter.Nodes, Rendered: renderedSettings(protos)}
	for _, d := range diffsBefore {
		rep.ConfigDifferences = append(rep.ConfigDifferences, "before: "+d)
	}
	rep.ConfigDifferences = append(rep.ConfigDifferences, diffsAfter...)
	idBefore, idAfter := map[string]string{}, map[string]string{}
	for _, n := range before.Nodes {
		idBefore[n.Name] = n.ClusterID
	}
	for _, n := range after.Nodes {
		idAfter[n.Name] = n.ClusterID
	}
	keeps := func(n string) bool { return !down[n] && idBefore[n] == idAfter[n] }
	rep.Transition = &TransitionReport{Dead: dead, Before: phBefore.Summary, Model: model, Measured: measured(&f, keeps)}
	logv("transition: %s", f.String())
	return rep, nil
}

// measured turns a Sampler's figures into the report's.
func measured(f *TransitionFigures, keeps func(string) bool) MeasuredTransition {
	m := MeasuredTransition{IntervalSeconds: SampleInterval.Seconds(), DurationSeconds: f.Duration.Seconds(), Samples: f.Samples,
		MissingPairSamples: f.MissingPairSamples, MissingPairs: len(f.MissingByPair), LongestGapSeconds: f.LongestGap.Seconds(),
		LongestGapPair: f.LongestGapPair, SessionsRestarted: len(f.Restarts), SessionsRemoved: len(f.Removed), Configures: len(f.Reconfigured),
		RoutesAtStart: f.SteadyRoutes, PeakRoutes: f.PeakRoutes, PeakNode: f.PeakNode}
	if f.MissingPairSamples == 0 {
		m.LongestGapSeconds, m.LongestGapPair = 0, ""
	}
	var pairs []string
	m.MissingPairSamplesKeepingRole, pairs = f.MissingWhere(func(a, b string) bool { return keeps(a) && keeps(b) })
	m.MissingKeepingRole = pairs[:min(20, len(pairs))]
	m.RestartsByNode = nodeCounts(f.RestartsByNode())
	restarted := f.RestartedSessions()
	m.Restarted = restarted[:min(40, len(restarted))]
	changed := map[string]int{}
	for _, r := range f.Reconfigured {
		if len(r.Changed) > 0 {
			changed[r.Node] += len(r.Changed)
		}
	}
	m.ChangedProtocols = nodeCounts(changed)
	return m
}

func nodeCounts(m map[string]int) []bgpmodel.NodeCount {
	var out []bgpmodel.NodeCount
	for n, c := range m {
		out = append(out, bgpmodel.NodeCount{Node: n, Count: c})
	}
	slices.SortFunc(out, func(x, y bgpmodel.NodeCount) int {
		return cmp.Or(cmp.Compare(y.Count, x.Count), strings.Compare(x.Node, y.Node))
	})
	return out
}

// awaitRendered waits until the Lab gave no configure for renderQuiet (and at least renderQuiet
// passed since since): confd rendered the plan and every BIRD whose configuration changed loaded it.
func awaitRendered(ctx context.Context, lab *Lab, since time.Time, timeout time.Duration) error {
	deadline := since.Add(timeout)
	last, lastAt := -1, time.Now()
	for {
		n := len(lab.Reconfigures())
		if n != last {
			last, lastAt = n, time.Now()
		}
		if time.Since(lastAt) >= renderQuiet && time.Since(since) >= renderQuiet {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the BIRDs were still being reconfigured %v after the plan was written", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(followPause):
		}
	}
}

// clusterState is the state of a cluster as it is, its nodes in the given order (node i gets
// NodeAddress(i)), its BGPPeers (a peerIP that was a node's address names that node's new one) and
// the default BGPConfiguration as the plan's (AS number, node-to-node mesh as asked).
func clusterState(nodes []*extender.Node, peers []apiv3.BGPPeer, model *bgpmodel.Topology, opts Options) (*calicoState, error) {
	st := &calicoState{policy: "(the state before)", model: model}
	realIP := map[string]int{}
	for i, n := range nodes {
		if a := n.Annotations[annotationIPv4Address]; a != "" {
			if p, err := netip.ParsePrefix(a); err == nil {
				realIP[p.Addr().String()] = i
			} else if ad, err := netip.ParseAddr(a); err == nil {
				realIP[ad.String()] = i
			}
		}
		st.nodes = append(st.nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: n.Labels, Annotations: n.Annotations}})
		if model.Nodes[i].ClusterID != "" {
			st.rrs = append(st.rrs, n.Name)
		}
	}
	for _, p := range peers {
		st.peers = append(st.peers, apiv3.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Labels: p.Labels}, Spec: p.Spec})
	}
	asn := numorstring.ASNumber(opts.ASN)
	mesh := opts.NodeToNodeMesh
	st.configs = []apiv3.BGPConfiguration{{
		ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec:       apiv3.BGPConfigurationSpec{ASNumber: &asn, NodeToNodeMeshEnabled: &mesh},
	}}
	return st, st.assign(realIP)
}

// apply writes st over the scratch's state in place, in the order the product's reconciler
// writes a plan: the BGPPeers created or updated, then the Nodes' labels and annotations, then the
// BGPPeers st does not have deleted. Every write goes out as soon as the last one returned.
func (s *Scratch) apply(ctx context.Context, st *calicoState) error {
	peers := s.dyn.Resource(calico.CRD.WithResource("bgppeers"))
	list, err := peers.List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing BGPPeers: %w", err)
	}
	have := map[string]string{}
	for _, p := range list.Items {
		have[p.GetName()] = p.GetResourceVersion()
	}
	want := map[string]bool{}
	for i := range st.peers {
		p := st.peers[i]
		p.ResourceVersion, p.UID, p.CreationTimestamp = "", "", metav1.Time{}
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&p)
		if err != nil {
			return err
		}
		u := &unstructured.Unstructured{Object: m}
		u.SetAPIVersion(calico.CRD.String())
		u.SetKind(apiv3.KindBGPPeer)
		want[p.Name] = true
		if rv, ok := have[p.Name]; ok {
			u.SetResourceVersion(rv)
			_, err = peers.Update(ctx, u, metav1.UpdateOptions{})
		} else {
			_, err = peers.Create(ctx, u, metav1.CreateOptions{})
		}
		if err != nil {
			return fmt.Errorf("BGPPeer %s: %w", p.Name, err)
		}
	}
	for _, n := range st.nodes {
		for {
			cur, err := s.cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("node %s: %w", n.Name, err)
			}
			if maps.Equal(cur.Labels, n.Labels) && maps.Equal(cur.Annotations, n.Annotations) {
				break
			}
			cur.Labels, cur.Annotations = n.Labels, n.Annotations
			_, err = s.cs.CoreV1().Nodes().Update(ctx, cur, metav1.UpdateOptions{})
			if apierrors.IsConflict(err) {
				continue
			}
			if err != nil {
				return fmt.Errorf("node %s: %w", n.Name, err)
			}
			break
		}
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(have)) {
		if want[name] {
			continue
		}
		if err := peers.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("BGPPeer %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}
