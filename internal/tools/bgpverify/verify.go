// Package bgpverify runs a plan on real BGP speakers: one speaker per node, all iBGP in one AS, each
// on its own loopback address and advertising its own /24 block, with the sessions Calico's confd
// derives from the plan's labels, annotations and BGPPeers (the same derivation as the graph model
// in internal/bgpmodel). It waits for the routes to converge and reports, for every node, which
// other nodes' blocks it learnt; failure drills stop speakers and check the survivors again.
//
// Three backends: in-process GoBGP servers; real BIRD 1.6 processes (Calico's BGP daemon is a
// fork of it) configured the way Calico's bird.cfg.template configures them; and calico, where
// Calico's own confd renders each node's BIRD configuration from a kube-apiserver holding the
// state the product writes, and each BIRD runs in a network namespace of its own (calico.go).
//
// Offline tool: the verify command and the end-to-end tests (internal/serve: the cluster's own
// state on Calico's confd and BIRD) call it.
package bgpverify

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
)

// Speaker backends.
const (
	SpeakerGoBGP = "gobgp"
	SpeakerBIRD  = "bird"
)

// DefaultASN is Calico's default AS number.
const DefaultASN = 64512

// DefaultMaxNodes is the --max-nodes guard of each backend.
var DefaultMaxNodes = map[string]int{SpeakerGoBGP: 300, SpeakerBIRD: 200, SpeakerCalico: 200}

// Options configure a run.
type Options struct {
	Speaker string // gobgp (default), bird or calico
	ASN     uint32 // default 64512
	// MaxNodes refuses larger plans (default per backend: DefaultMaxNodes).
	MaxNodes int
	// Timeout bounds each convergence wait [gobgp: 60s + 0.3s per node; bird, calico: 2m + 0.6s
	// per node]; a wait whose nodes all have their routes while a session straggles gets one
	// minute more (stragglerGrace).
	Timeout time.Duration
	// Stable is how long the route counts must stay unchanged to call it converged [2s; 3s for bird].
	Stable time.Duration
	// FailZone stops every speaker of that zone after convergence.
	FailZone string
	// FailRR stops those route reflectors after convergence: node names, or a count N for the
	// plan's first N route reflectors.
	FailRR []string
	// Drills, after the first convergence, stops each zone and then each route reflector in turn,
	// checks the survivors and starts them again (gobgp cannot: use FailZone or FailRR). Each
	// drill's outcome is in Report.Families (every run with Drills reports per family).
	Drills bool
	// DrillRRs, with Drills, keeps every zone drill but only the first DrillRRs route reflector
	// drills (the route reflectors in the model's node order) [0: every route reflector].
	DrillRRs int
	// CalicoRouterID is calico-node's CALICO_ROUTER_ID for confd (calico speaker): "" (each
	// node's IPv4 address is its router ID) or "hash" (a hash of the node name: what IPv6-only
	// nodes need).
	CalicoRouterID string
	// NodeToNodeMesh turns Calico's node-to-node mesh on for nodes without a cluster ID.
	NodeToNodeMesh bool
	// Net is the second octet of the speakers' 127.Net.x.y addresses [random in 100..249].
	Net int
	// Port is the BGP port every speaker listens on [179].
	Port int
	// BIRD is the bird binary [$BIRD, else bird from PATH].
	BIRD string
	// Confd is Calico's confd binary (calico speaker) [$CONFD, else hack/tools.sh's cache].
	Confd string
	// Scratch is the kube-apiserver the calico speaker writes a plan's (or a live cluster's) state
	// into for confd [nil: one is started and stopped for the run].
	Scratch *Scratch
	// Log receives progress lines (nil: none).
	Log io.Writer
}

// Summary holds the figures of one convergence.
type Summary struct {
	Nodes               int     `json:"nodes"`
	Sessions            int     `json:"sessions"`
	EstablishedSessions int     `json:"establishedSessions"`
	MissingPairs        int     `json:"missingPairs"`
	Converged           bool    `json:"converged"`
	ConvergedSeconds    float64 `json:"convergedSeconds"`
	MaxRoutesPerNode    int     `json:"maxRoutesPerNode"`
	BusiestNode         string  `json:"busiestNode,omitempty"`
	TotalRoutes         int     `json:"totalRoutes"`
	// StaleBlocks counts blocks of stopped nodes still held by nodes up (graceful restart).
	StaleBlocks int `json:"staleBlocks,omitempty"`
	// The graph model's figures for the same plan and failures.
	ModelMissingPairs     int64   `json:"modelMissingPairs"`
	ModelMaxRoutesPerNode float64 `json:"modelMaxRoutesPerNode"`
	// BIRD only: resident memory of the largest and of all BIRD processes.
	MaxMemoryKiB   int `json:"maxMemoryKiB,omitempty"`
	TotalMemoryKiB int `json:"totalMemoryKiB,omitempty"`
}

// NodeReport is one node's outcome.
type NodeReport struct {
	Name        string   `json:"name"`
	Zone        string   `json:"zone,omitempty"`
	Address     string   `json:"address"`
	Block       string   `json:"block"`
	ClusterID   string   `json:"clusterID,omitempty"`
	Down        bool     `json:"down,omitempty"`
	Sessions    int      `json:"sessions"`
	Established int      `json:"established"`
	Routes      int      `json:"routes"`
	ModelRoutes float64  `json:"modelRoutes"`
	Blocks      int      `json:"blocks"`
	Stale       int      `json:"staleBlocks,omitempty"`
	Missing     []string `json:"missing,omitempty"`
}

// Phase is one convergence: the plan as started, or after a failure drill.
type Phase struct {
	Down    []string     `json:"down,omitempty"`
	Summary Summary      `json:"summary"`
	Nodes   []NodeReport `json:"nodes"`
}

// Report is the outcome of a run.
type Report struct {
	Speaker string       `json:"speaker"`
	Policy  string       `json:"policy"`
	Summary Summary      `json:"summary"`
	Nodes   []NodeReport `json:"nodes"`
	// AfterFailure is the outcome after the failure drill, when one was asked for.
	AfterFailure *Phase `json:"afterFailure,omitempty"`
	// Families (when a node has an IPv6 address, or with Options.Drills) is the outcome per
	// address family, "ipv4" and "ipv6": each family's speakers (bird and bird6) on the sessions
	// both of whose ends have an address of it. Summary, Nodes and AfterFailure above are then the
	// first family's (ipv4 when a node has it).
	Families map[string]*FamilyReport `json:"families,omitempty"`
	// ConfigDifferences (calico speaker) lists where the BIRD configurations confd rendered differ
	// from this project's derivation of the sessions (internal/bgpmodel): a session one has and
	// the other has not, an rr client flag or cluster ID the model does not expect.
	ConfigDifferences []string `json:"configDifferences,omitempty"`
	// Rendered (calico speaker) counts the session settings of the BGP protocols confd rendered.
	Rendered *RenderedSettings `json:"rendered,omitempty"`
	// Transition (verify --from) is the replayed transition from the state given to the plan:
	// what BIRD did while the plan was applied, beside the graph model's figures.
	Transition *TransitionReport `json:"transition,omitempty"`
}

// RenderedSettings counts what BIRD's configurations, as confd rendered them, set on their BGP
// protocols (the settings of BGPPeers: a policy's spec.bgpPeer). Passwords are counted, never
// shown.
type RenderedSettings struct {
	// Protocols counts the `protocol bgp` blocks of every node's bird.cfg.
	Protocols int `json:"protocols"`
	// Password counts the protocols with a `password`.
	Password int `json:"password"`
	// RestartTime counts the protocols by their `graceful restart time` (seconds).
	RestartTime map[string]int `json:"restartTime,omitempty"`
	// TTLSecurity counts the protocols with `ttl security on`.
	TTLSecurity int `json:"ttlSecurity,omitempty"`
}

// MissingPairs is the largest missing-pair count of every phase.
func (r *Report) MissingPairs() int {
	n := r.Summary.MissingPairs
	if r.AfterFailure != nil {
		n = max(n, r.AfterFailure.Summary.MissingPairs)
	}
	for _, f := range r.Families {
		n = max(n, f.MissingPairs())
	}
	return n
}

// InputError is bad input: an option or a plan that cannot be run.
type InputError struct{ error }

func inputErr(format string, a ...any) error { return InputError{fmt.Errorf(format, a...)} }

// speakerNode is what one speaker is configured with.
type speakerNode struct {
	name      string
	addr      netip.Addr
	block     netip.Prefix
	clusterID string
	peers     []speakerPeer
	// routerID is the BGP router ID when it is not addr (an IPv6 speaker's: a 4-octet ID).
	routerID netip.Addr
	// absent: the node has no address of the fleet's family, and no speaker in it.
	absent bool
}

// routerIDOrAddr is the node's router ID: routerID, else its address.
func (nd speakerNode) routerIDOrAddr() netip.Addr {
	if nd.routerID.IsValid() {
		return nd.routerID
	}
	return nd.addr
}

type speakerPeer struct {
	idx      int
	addr     netip.Addr
	rrClient bool // the local node treats the peer as its route reflector client
	passive  bool // Calico's mesh: the side with the lower address waits for the other to connect
}

// nodeState is what a speaker reports.
type nodeState struct {
	blocks      []netip.Prefix // distinct prefixes in its table
	routes      int            // paths stored, its own included
	established int
	memoryKiB   int
}

type fleet interface {
	start(ctx context.Context) error
	poll(ctx context.Context, i int) (nodeState, error)
	stop(i int) error
	close()
}

// Address is the loopback address of node i (0-based) in the 127.net/16 range.
func Address(net, i int) netip.Addr {
	return netip.AddrFrom4([4]byte{127, byte(net), byte((i + 1) >> 8), byte(i + 1)})
}

// Block is the /24 pod block node i advertises.
func Block(i int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 0}), 24)
}

// Run verifies a plan on real speakers.
func Run(ctx context.Context, in extender.Input, res *extender.Result, opts Options) (*Report, error) {
	opts, err := prepare(opts, len(res.Nodes))
	if err != nil {
		return nil, err
	}
	topo, err := bgpmodel.FromPlan(in, res, bgpmodel.Options{NodeToNodeMesh: opts.NodeToNodeMesh})
	if err != nil {
		return nil, InputError{err}
	}
	var rrs []string
	for _, rr := range res.RouteReflectors {
		rrs = append(rrs, rr.Node)
	}
	if opts.Speaker == SpeakerCalico {
		st, err := planState(in, res, topo, opts)
		if err != nil {
			return nil, err
		}
		return runCalico(ctx, st, opts)
	}
	if usesFamilies(topo, opts) {
		return runSpeakerFamilies(ctx, res.Policy, topo, rrs, opts)
	}
	return runSpeakers(ctx, res.Policy, topo, rrs, opts)
}

// prepare checks the options and fills in the defaults for a run of n nodes.
func prepare(opts Options, n int) (Options, error) {
	if opts.Speaker == "" {
		opts.Speaker = SpeakerGoBGP
	}
	if _, ok := DefaultMaxNodes[opts.Speaker]; !ok {
		return opts, inputErr("--speaker: %q is not gobgp, bird or calico", opts.Speaker)
	}
	if opts.MaxNodes <= 0 {
		opts.MaxNodes = DefaultMaxNodes[opts.Speaker]
	}
	if opts.ASN == 0 {
		opts.ASN = DefaultASN
	}
	if opts.Port == 0 {
		opts.Port = 179
	}
	if opts.Net == 0 {
		opts.Net = 100 + rand.IntN(150)
	}
	if opts.Net < 1 || opts.Net > 254 {
		return opts, inputErr("address octet %d is not in 1..254", opts.Net)
	}
	if opts.Stable <= 0 {
		opts.Stable = 2 * time.Second
		if opts.Speaker != SpeakerGoBGP {
			opts.Stable = 3 * time.Second
		}
	}
	if n == 0 {
		return opts, inputErr("the plan has no nodes")
	}
	if n > opts.MaxNodes {
		return opts, inputErr("the plan has %d nodes, more than --max-nodes %d for %s", n, opts.MaxNodes, opts.Speaker)
	}
	if n > 65000 {
		return opts, inputErr("at most 65000 nodes fit the address plan")
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout(opts.Speaker, n)
	}
	return opts, nil
}

// DefaultTimeout bounds each convergence wait of speaker with n nodes when Options.Timeout is not
// set: GoBGP 60 s + 0.3 s per node; BIRD and calico 2 min + 0.6 s per node (Calico's
// node-specific peers have no passive side: both ends connect, and a connection collision costs a
// retry: connect retry time 5, error wait time 5,30).
func DefaultTimeout(speaker string, n int) time.Duration {
	if speaker == SpeakerGoBGP {
		return 60*time.Second + time.Duration(n)*300*time.Millisecond
	}
	return 2*time.Minute + time.Duration(n)*600*time.Millisecond
}

// runSpeakers runs the gobgp or bird speakers with the sessions of topo.
func runSpeakers(ctx context.Context, policy string, topo *bgpmodel.Topology, rrs []string, opts Options) (*Report, error) {
	down, downNames, err := failureMask(topo, rrs, opts)
	if err != nil {
		return nil, err
	}
	nodes := speakerNodes(topo, opts)
	var f fleet
	switch opts.Speaker {
	case SpeakerBIRD:
		f, err = newBIRDFleet(nodes, opts)
	default:
		f, err = newGoBGPFleet(nodes, opts)
	}
	if err != nil {
		return nil, err
	}
	logf(opts, "starting %d %s speakers on 127.%d.0.0/16 with %d sessions", len(nodes), opts.Speaker, opts.Net, topo.SessionCount(nil))
	return runFleet(ctx, f, fleetRun{policy: policy, topo: topo, model: topo, nodes: nodes, down: down, downNames: downNames}, opts)
}

// fleetRun is what runFleet needs besides the fleet.
type fleetRun struct {
	policy string
	// topo has the sessions the speakers are configured with: convergence waits for them and for
	// the blocks they carry.
	topo *bgpmodel.Topology
	// model is the project's own derivation of the sessions; its figures are reported as the
	// graph model's (the same as topo, except for the calico speaker where topo is confd's).
	model     *bgpmodel.Topology
	nodes     []speakerNode
	down      []bool
	downNames []string
}

// runFleet starts the speakers, waits for convergence, runs the failure drill and stops them.
func runFleet(ctx context.Context, f fleet, r fleetRun, opts Options) (*Report, error) {
	defer func() {
		t := time.Now()
		f.close()
		logf(opts, "stopped every speaker in %v", time.Since(t).Round(time.Millisecond))
	}()
	rep := &Report{Speaker: opts.Speaker, Policy: r.policy}
	start := time.Now()
	if err := f.start(ctx); err != nil {
		return nil, err
	}
	phase, err := converge(ctx, f, r.topo, r.nodes, nil, start, opts)
	if err != nil {
		return nil, err
	}
	if err := modelFigures(phase, r.model, r.topo, nil); err != nil {
		return nil, err
	}
	rep.Summary, rep.Nodes = phase.Summary, phase.Nodes
	if r.down != nil {
		logf(opts, "stopping %d speakers: %s", len(r.downNames), strings.Join(r.downNames, ","))
		start = time.Now()
		for i, d := range r.down {
			if d {
				if err := f.stop(i); err != nil {
					return nil, err
				}
			}
		}
		phase, err := converge(ctx, f, r.topo, r.nodes, r.down, start, opts)
		if err != nil {
			return nil, err
		}
		if err := modelFigures(phase, r.model, r.topo, r.down); err != nil {
			return nil, err
		}
		phase.Down = r.downNames
		rep.AfterFailure = phase
	}
	return rep, nil
}

// modelFigures replaces a phase's graph model figures with those of model when it is not the
// topology the speakers ran.
func modelFigures(ph *Phase, model, ran *bgpmodel.Topology, down []bool) error {
	if model == ran {
		return nil
	}
	m, err := model.Propagate(down)
	if err != nil {
		return err
	}
	ph.Summary.ModelMissingPairs, ph.Summary.ModelMaxRoutesPerNode = m.Summary.MissingPairs, m.Summary.MaxRoutesPerNode
	for i := range ph.Nodes {
		ph.Nodes[i].ModelRoutes = m.Nodes[i].Routes
	}
	return nil
}

func logf(opts Options, format string, a ...any) {
	if opts.Log != nil {
		fmt.Fprintf(opts.Log, format+"\n", a...)
	}
}

// failureMask returns the nodes the drill stops; rrs are the route reflectors in the order
// --fail-rr N counts them (the plan's).
func failureMask(topo *bgpmodel.Topology, rrs []string, opts Options) ([]bool, []string, error) {
	if opts.FailZone == "" && len(opts.FailRR) == 0 {
		return nil, nil, nil
	}
	down := make([]bool, len(topo.Nodes))
	if opts.FailZone != "" {
		found := false
		for i, nd := range topo.Nodes {
			if nd.Zone == opts.FailZone {
				down[i], found = true, true
			}
		}
		if !found {
			return nil, nil, inputErr("--fail-zone: no node of the plan is in zone %q", opts.FailZone)
		}
	}
	for _, s := range opts.FailRR {
		if k, err := strconv.Atoi(s); err == nil {
			if k < 1 || k > len(rrs) {
				return nil, nil, inputErr("--fail-rr: %d is not between 1 and the plan's %d route reflectors", k, len(rrs))
			}
			for _, rr := range rrs[:k] {
				down[topo.Index(rr)] = true
			}
			continue
		}
		i := topo.Index(s)
		if i < 0 {
			return nil, nil, inputErr("--fail-rr: no node %q in the plan", s)
		}
		if !topo.IsRR(i) {
			return nil, nil, inputErr("--fail-rr: node %q is not a route reflector in the plan", s)
		}
		down[i] = true
	}
	var names []string
	for i, d := range down {
		if d {
			names = append(names, topo.Nodes[i].Name)
		}
	}
	if len(names) == len(down) {
		return nil, nil, inputErr("the failure drill would stop every node")
	}
	return down, names, nil
}

// speakerNodes are the nodes of topo on 127.net addresses, each with its own block.
func speakerNodes(topo *bgpmodel.Topology, opts Options) []speakerNode {
	addrs, blocks := make([]netip.Addr, len(topo.Nodes)), make([]netip.Prefix, len(topo.Nodes))
	for i := range topo.Nodes {
		addrs[i], blocks[i] = Address(opts.Net, i), Block(i)
	}
	return speakerNodesAt(topo, addrs, blocks)
}

// speakerNodesAt are the nodes of topo with the given addresses and blocks, and their peers as
// Calico configures them: `rr client` toward a peer with no or another cluster ID, and passive
// toward a mesh peer with a higher address (bird.cfg.template's Mesh_ protocols; its Node_
// protocols, the BGPPeers' sessions, have no passive side).
func speakerNodesAt(topo *bgpmodel.Topology, addrs []netip.Addr, blocks []netip.Prefix) []speakerNode {
	nodes := make([]speakerNode, len(topo.Nodes))
	for i, nd := range topo.Nodes {
		nodes[i] = speakerNode{name: nd.Name, addr: addrs[i], block: blocks[i], clusterID: nd.ClusterID}
	}
	add := func(a, b int, mesh bool) {
		pa, pb := nodes[a].addr, nodes[b].addr
		nodes[a].peers = append(nodes[a].peers, speakerPeer{idx: b, addr: pb, rrClient: topo.RRClient(a, b), passive: mesh && pb.String() > pa.String()})
	}
	seen := map[[2]int]bool{}
	for _, s := range topo.Sessions {
		a, b := int(s[0]), int(s[1])
		seen[[2]int{a, b}] = true
		add(a, b, false)
		add(b, a, false)
	}
	if topo.Mesh {
		for a := range nodes {
			for b := a + 1; b < len(nodes); b++ {
				if !topo.IsRR(a) && !topo.IsRR(b) && !seen[[2]int{a, b}] {
					add(a, b, true)
					add(b, a, true)
				}
			}
		}
	}
	for i := range nodes {
		slices.SortFunc(nodes[i].peers, func(x, y speakerPeer) int { return x.idx - y.idx })
	}
	return nodes
}

// stragglerGrace is how much longer converge waits, once, when every node has its routes at the
// timeout but a session is still not established.
const stragglerGrace = time.Minute

// converge polls the speakers until every node up has the blocks the model predicts, every session
// between nodes up is established and the route counts have not changed for opts.Stable; or until
// the timeout. Blocks of stopped nodes may stay: with `graceful restart` BIRD keeps a lost peer's
// routes as stale for the restart time (120 s), as calico-node's BIRD does; they are reported as
// stale blocks.
func converge(ctx context.Context, f fleet, topo *bgpmodel.Topology, nodes []speakerNode, down []bool, start time.Time, opts Options) (*Phase, error) {
	return convergeTo(ctx, f, topo, nodes, down, start, opts, nil)
}

// target says whether node i's polled state is exactly the one a phase ends in (its sessions
// established, its routes and blocks; see drillTarget).
type target func(i int, st nodeState) bool

// convergeTo is converge for a phase whose end state is known (the drills'): with target set, the
// nodes are polled in parallel every 150 ms, and the phase has converged as soon as every node up
// meets target in two polls running (or, as converge does, when nothing changed for opts.Stable:
// a state target never meets is still measured, only later), and never while a node up still
// has a block of a stopped node: on a loaded machine (100-node labs, load average 50 to 140)
// nothing changed for 3 s halfway through the withdrawal of a lost zone's blocks (a Hierarchical
// drill's busiest node at 1,888 paths, where the model and the target say 670), and the phase
// ended with hundreds of the lost nodes' blocks still in place.
func convergeTo(ctx context.Context, f fleet, topo *bgpmodel.Topology, nodes []speakerNode, down []bool, start time.Time, opts Options, want target) (*Phase, error) {
	m, err := topo.Propagate(down)
	if err != nil {
		return nil, err
	}
	isDown := func(i int) bool { return down != nil && down[i] }
	blockOf := make(map[netip.Prefix]int, len(nodes))
	for i, nd := range nodes {
		blockOf[nd.block] = i
	}
	wantSessions := topo.SessionCount(down)
	interval := 250 * time.Millisecond
	if opts.Speaker != SpeakerGoBGP {
		interval = 500 * time.Millisecond
	}
	if want != nil {
		interval = 150 * time.Millisecond
	}
	deadline := start.Add(opts.Timeout)
	states := make([]nodeState, len(nodes))
	var lastSig string
	lastChange := time.Now()
	converged, extended, hitBefore := false, false, false
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if want != nil {
			if err := pollAll(ctx, f, nodes, isDown, states); err != nil {
				return nil, err
			}
		}
		var sig strings.Builder
		ready, hit := true, want != nil
		established := 0
		for i := range nodes {
			if isDown(i) {
				continue
			}
			if want == nil {
				st, err := f.poll(ctx, i)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", nodes[i].name, err)
				}
				states[i] = st
			}
			st := states[i]
			hit = hit && want(i, st)
			established += st.established
			fmt.Fprintf(&sig, "%d/%d/%d,", st.routes, len(st.blocks), st.established)
			if ready {
				has := make([]bool, len(nodes))
				for _, b := range st.blocks {
					if o, ok := blockOf[b]; ok {
						has[o] = true
					}
				}
				for o := range nodes {
					if !isDown(o) && m.Has(i, o) && !has[o] || want != nil && isDown(o) && has[o] {
						ready = false
						break
					}
				}
			}
		}
		now := time.Now()
		if s := sig.String(); s != lastSig {
			lastSig, lastChange = s, now
		}
		if ready && established/2 == wantSessions && (now.Sub(lastChange) >= opts.Stable || hit && hitBefore) {
			converged = true
			break
		}
		hitBefore = hit
		if now.After(deadline) {
			if ready && !extended && established/2 < wantSessions {
				// Every node has its routes and a session straggles (GoBGP under load once left
				// one of 591 half open to the end of its wait): one more stragglerGrace for the
				// speakers' own retry or resetStuck to bring it up.
				extended, deadline = true, now.Add(stragglerGrace)
				logf(opts, "every node has its routes after %v, %d of %d sessions established: waiting %v more", opts.Timeout, established/2, wantSessions, stragglerGrace)
			} else {
				logf(opts, "not converged after %v", now.Sub(start).Round(time.Second))
				break
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(interval):
		}
	}
	ph := &Phase{}
	s := &ph.Summary
	s.Converged = converged
	s.ConvergedSeconds = lastChange.Sub(start).Seconds()
	s.Sessions = wantSessions
	s.ModelMissingPairs, s.ModelMaxRoutesPerNode = m.Summary.MissingPairs, m.Summary.MaxRoutesPerNode
	ph.Nodes = make([]NodeReport, len(nodes))
	for i, nd := range nodes {
		r := &ph.Nodes[i]
		*r = NodeReport{Name: nd.name, Zone: topo.Nodes[i].Zone, Address: nd.addr.String(), Block: nd.block.String(), ClusterID: nd.clusterID, Down: isDown(i)}
		if r.Down {
			continue
		}
		s.Nodes++
		for _, p := range nd.peers {
			if !isDown(p.idx) {
				r.Sessions++
			}
		}
		st := states[i]
		r.Established, r.Routes, r.ModelRoutes = st.established, st.routes, m.Nodes[i].Routes
		s.EstablishedSessions += st.established
		has := make([]bool, len(nodes))
		for _, b := range st.blocks {
			o, ok := blockOf[b]
			switch {
			case !ok || o == i:
			case isDown(o):
				r.Stale++
				s.StaleBlocks++
			default:
				has[o] = true
				r.Blocks++
			}
		}
		for o := range nodes {
			if o != i && !isDown(o) && !has[o] {
				r.Missing = append(r.Missing, nodes[o].name)
			}
		}
		s.MissingPairs += len(r.Missing)
		s.TotalRoutes += st.routes
		if st.routes > s.MaxRoutesPerNode {
			s.MaxRoutesPerNode, s.BusiestNode = st.routes, nd.name
		}
		s.TotalMemoryKiB += st.memoryKiB
		s.MaxMemoryKiB = max(s.MaxMemoryKiB, st.memoryKiB)
	}
	s.EstablishedSessions /= 2
	logf(opts, "converged=%v in %.1fs: %d nodes, %d/%d sessions established, %d missing pairs (model %d), busiest %d routes (model %.0f)",
		converged, s.ConvergedSeconds, s.Nodes, s.EstablishedSessions, s.Sessions, s.MissingPairs, s.ModelMissingPairs, s.MaxRoutesPerNode, s.ModelMaxRoutesPerNode)
	return ph, nil
}

// pollAll polls every node up, eight at a time, into states.
func pollAll(ctx context.Context, f fleet, nodes []speakerNode, isDown func(int) bool, states []nodeState) error {
	errs := make([]error, len(nodes))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := range nodes {
		if isDown(i) {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			st, err := f.poll(ctx, i)
			if err != nil {
				errs[i] = fmt.Errorf("%s: %w", nodes[i].name, err)
				return
			}
			states[i] = st
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

var errStopped = errors.New("speaker stopped")
