package bgpverify

// Address families. Calico runs two BGP daemons per node: BIRD with bird.cfg (IPv4 unicast,
// sessions between nodes that both have an IPv4 address) and BIRD6 with bird6.cfg (IPv6 unicast,
// sessions between nodes that both have an IPv6 address), rendered from the same BGPPeers and
// cluster IDs. A run where some node has an IPv6 address runs one fleet per family the same way:
// each family's speakers (bird and bird6, or GoBGP servers on IPv4 and IPv6 addresses) run side by
// side, every node with an address of the family originating its block of that family, and the
// missing pairs are counted per family against the graph model of the family
// (bgpmodel.Topology.PropagateFamily: the nodes without an address of it count as down).

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
)

// The IPv6 addresses and blocks. Loopback speakers (gobgp, bird) listen on Address6, which this
// package adds to lo for the run (IPv6 has no loopback range like 127/8) and removes after. The
// calico speaker gives node i NodeAddress6(i) on its namespace's eth0 (the annotation
// projectcalico.org/IPv6Address) and the pod block Block6(i) in the IPv6 pool podPool6.
var (
	nodeNet6 = netip.MustParsePrefix("fd64::/64")
	podPool6 = netip.MustParsePrefix("fd10::/48")
)

// Address6 is the IPv6 loopback address of node i (0-based): fd67:0:0:<net>::<i+1>.
func Address6(net, i int) netip.Addr {
	var b [16]byte
	b[0], b[1], b[7], b[14], b[15] = 0xfd, 0x67, byte(net), byte((i+1)>>8), byte(i+1)
	return netip.AddrFrom16(b)
}

// NodeAddress6 is the IPv6 address node i gets with the calico speaker.
func NodeAddress6(i int) netip.Prefix {
	b := nodeNet6.Addr().As16()
	b[14], b[15] = byte((i+1)>>8), byte(i+1)
	return netip.PrefixFrom(netip.AddrFrom16(b), nodeNet6.Bits())
}

// Block6 is the /64 IPv6 pod block node i advertises: fd10:0:0:<i>::/64.
func Block6(i int) netip.Prefix {
	b := podPool6.Addr().As16()
	b[6], b[7] = byte(i>>8), byte(i)
	return netip.PrefixFrom(netip.AddrFrom16(b), 64)
}

// FamilyReport is one address family's outcome: the nodes of the family (those without an
// address of it show as down, and count in no figure), fresh, after the failure asked for, and
// after each drill of Options.Drills.
type FamilyReport struct {
	Summary      Summary      `json:"summary"`
	Nodes        []NodeReport `json:"nodes"`
	AfterFailure *Phase       `json:"afterFailure,omitempty"`
	Drills       []*Phase     `json:"drills,omitempty"`
}

// MissingPairs is the largest missing-pair count of the family's phases.
func (f *FamilyReport) MissingPairs() int {
	n := f.Summary.MissingPairs
	if f.AfterFailure != nil {
		n = max(n, f.AfterFailure.Summary.MissingPairs)
	}
	for _, d := range f.Drills {
		n = max(n, d.Summary.MissingPairs)
	}
	return n
}

// famFleet is one family's speakers.
type famFleet struct {
	fam   extender.Families
	f     fleet
	topo  *bgpmodel.Topology // the sessions the speakers run (confd's, for the calico speaker)
	nodes []speakerNode
}

// restarter is a fleet that can start a stopped speaker again (the drills).
type restarter interface {
	restart(ctx context.Context, i int) error
}

// famRun is what runFamilies needs besides the fleets.
type famRun struct {
	policy    string
	model     *bgpmodel.Topology // the project's derivation of the sessions
	rrs       []string
	down      []bool
	downNames []string
	cleanup   func() // after every fleet is closed (the lab, the loopback addresses)
}

// usesFamilies says whether a run goes per family: a node has an IPv6 address, or drills are asked.
func usesFamilies(topo *bgpmodel.Topology, opts Options) bool {
	return opts.Drills || topo.Families().Has(extender.FamilyIPv6)
}

// familyNodes are the speaker nodes of family fam: the addresses and blocks of the family, the
// sessions of topo whose ends both have an address of it; the others are absent.
func familyNodes(topo *bgpmodel.Topology, fam extender.Families, addrs []netip.Addr, blocks []netip.Prefix, routerIDs []netip.Addr) []speakerNode {
	absent := topo.FamilyDown(fam, nil)
	nodes := speakerNodesAt(topo, addrs, blocks)
	for i := range nodes {
		nodes[i].absent = absent[i]
		if routerIDs != nil {
			nodes[i].routerID = routerIDs[i]
		}
		if absent[i] {
			nodes[i].peers = nil
			continue
		}
		nodes[i].peers = slices.DeleteFunc(nodes[i].peers, func(p speakerPeer) bool { return absent[p.idx] })
	}
	return nodes
}

// drillMasks are the drills of Options.Drills: each zone of the model, then each route reflector,
// each alone (a drill that would stop every node is left out); rrs > 0 keeps the first rrs route
// reflectors' drills only (Options.DrillRRs).
func drillMasks(model *bgpmodel.Topology, rrs int) (masks [][]bool, names [][]string) {
	var zones []string
	for _, nd := range model.Nodes {
		if nd.Zone != "" && !slices.Contains(zones, nd.Zone) {
			zones = append(zones, nd.Zone)
		}
	}
	slices.Sort(zones)
	add := func(in func(i int) bool) {
		m := make([]bool, len(model.Nodes))
		var ns []string
		for i := range model.Nodes {
			if in(i) {
				m[i] = true
				ns = append(ns, model.Nodes[i].Name)
			}
		}
		if len(ns) > 0 && len(ns) < len(m) {
			masks, names = append(masks, m), append(names, ns)
		}
	}
	for _, z := range zones {
		add(func(i int) bool { return model.Nodes[i].Zone == z })
	}
	n := 0
	for r := range model.Nodes {
		if model.IsRR(r) && (rrs <= 0 || n < rrs) {
			n++
			add(func(i int) bool { return i == r })
		}
	}
	return masks, names
}

func or(a, b []bool) []bool {
	out := make([]bool, max(len(a), len(b)))
	for i := range out {
		out[i] = (i < len(a) && a[i]) || (i < len(b) && b[i])
	}
	return out
}

// runFamilies starts every family's fleet, waits for each family to converge, then runs the
// failure asked for (opts.FailZone, FailRR) and the drills (opts.Drills: each zone and each route
// reflector lost in turn, every speaker started again between two drills). The report's Summary,
// Nodes and AfterFailure are the first family's (IPv4 when a node has it), Families every
// family's.
func runFamilies(ctx context.Context, fleets []famFleet, r famRun, opts Options) (*Report, error) {
	defer func() {
		t := time.Now()
		for _, fl := range fleets {
			fl.f.close()
		}
		if r.cleanup != nil {
			r.cleanup()
		}
		logf(opts, "stopped every speaker in %v", time.Since(t).Round(time.Millisecond))
	}()
	rep := &Report{Speaker: opts.Speaker, Policy: r.policy, Families: map[string]*FamilyReport{}}
	start := time.Now()
	for _, fl := range fleets {
		if err := fl.f.start(ctx); err != nil {
			return nil, err
		}
	}
	phases := func(down []bool, names []string, start time.Time) ([]*Phase, error) {
		out := make([]*Phase, len(fleets))
		for k, fl := range fleets {
			ph, err := familyPhase(ctx, fl, r, down, names, start, nil, opts)
			if err != nil {
				return nil, err
			}
			out[k] = ph
		}
		return out, nil
	}
	fresh, err := phases(nil, nil, start)
	if err != nil {
		return nil, err
	}
	for k, fl := range fleets {
		rep.Families[fl.fam.Key()] = &FamilyReport{Summary: fresh[k].Summary, Nodes: fresh[k].Nodes}
	}
	rep.Summary, rep.Nodes = fresh[0].Summary, fresh[0].Nodes
	if opts.Drills {
		if err := runDrills(ctx, fleets, r, rep, fresh, opts); err != nil {
			return nil, err
		}
	}
	if r.down != nil {
		logf(opts, "stopping %d speakers: %s", len(r.downNames), strings.Join(r.downNames, ","))
		t := time.Now()
		if err := stopNodes(fleets, r.down); err != nil {
			return nil, err
		}
		after, err := phases(r.down, r.downNames, t)
		if err != nil {
			return nil, err
		}
		for k, fl := range fleets {
			rep.Families[fl.fam.Key()].AfterFailure = after[k]
		}
		rep.AfterFailure = after[0]
	}
	return rep, nil
}

// familyPhase waits for fleet fl to converge with the nodes of down stopped (and those without an
// address of its family) and adds the model's figures for the family to the phase. With want
// set, the wait ends as soon as every node up is in the state want describes (convergeTo).
func familyPhase(ctx context.Context, fl famFleet, r famRun, down []bool, names []string, start time.Time, want target, opts Options) (*Phase, error) {
	d := or(down, r.model.FamilyDown(fl.fam, nil))
	ph, err := convergeTo(ctx, fl.f, fl.topo, fl.nodes, d, start, opts, want)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", fl.fam, err)
	}
	m, err := r.model.PropagateFamily(fl.fam, down)
	if err != nil {
		return nil, err
	}
	ph.Summary.ModelMissingPairs, ph.Summary.ModelMaxRoutesPerNode = m.Summary.MissingPairs, m.Summary.MaxRoutesPerNode
	for i := range ph.Nodes {
		ph.Nodes[i].ModelRoutes = m.Nodes[i].Routes
	}
	ph.Down = names
	logf(opts, "%s%s: %d missing pairs (model %d) in %.1fs", fl.fam, downSuffix(names), ph.Summary.MissingPairs, ph.Summary.ModelMissingPairs, time.Since(start).Seconds())
	return ph, nil
}

// stopNodes stops the speakers of the nodes of down in every fleet, all at once, their peers
// withdrawing their routes at once. With confd's `graceful restart`, the peers of a speaker whose
// TCP sessions merely close keep its routes as stale for the restart time, 120 s, so a SIGKILL
// would not do; a SIGTERM'd BIRD closes its sessions with a Cease, but under load its peers did
// not always take it as one (why, we did not find out): in a 100-node lab on a machine loaded 60
// to 100 the survivors kept every block a lost zone's route reflectors had reflected (2,211 stale
// blocks), showing "Neighbor graceful restart active" toward them. So where the fleet can hold sessions
// (sessionGate: BIRD), the survivors' sessions toward the lost nodes are held down first, which
// withdraws the lost nodes' routes as a Cease would (the state of the survivors once the restart
// time is over), and only then are the lost speakers stopped; restartNodes lets them up again.
func stopNodes(fleets []famFleet, down []bool) error {
	var peers []gateEntry
	eachLostPeering(fleets, down, func(g sessionGate, _ int, addr netip.Addr, p speakerPeer) {
		if !down[p.idx] {
			peers = append(peers, gateEntry{g, p.idx, addr})
		}
	})
	if err := holdAll(peers, true); err != nil {
		return err
	}
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, fl := range fleets {
		for i, d := range down {
			if d && !fl.nodes[i].absent {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := fl.f.stop(i); err != nil {
						mu.Lock()
						errs = append(errs, fmt.Errorf("%s: %s: %w", fl.fam, fl.nodes[i].name, err))
						mu.Unlock()
					}
				}()
			}
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// drillTarget is the state node i of fleet fl ends in once the survivors have converged with the
// nodes of d (down, and those without an address of the family) stopped: every session toward a
// node up established, exactly the blocks m (the family's graph model of that failure) says and
// none of a stopped node, and routes paths stored (-1: any number; the wait then ends on opts.
// Stable, as converge's does).
func drillTarget(fl famFleet, d []bool, m *bgpmodel.Model, routes func(i int) int) target {
	blockOf := make(map[netip.Prefix]int, len(fl.nodes))
	for i, nd := range fl.nodes {
		blockOf[nd.block] = i
	}
	return func(i int, st nodeState) bool {
		est := 0
		for _, p := range fl.nodes[i].peers {
			if !d[p.idx] {
				est++
			}
		}
		want := routes(i)
		if want < 0 || st.routes != want || st.established != est {
			return false
		}
		has := 0
		for _, b := range st.blocks {
			o, ok := blockOf[b]
			switch {
			case ok && o == i:
			case !ok || d[o] || !m.Has(i, o):
				return false
			default:
				has++
			}
		}
		return has == m.Nodes[i].Prefixes
	}
}

// runDrills runs the drills of opts.Drills on fleets that run (after the fresh phase, whose
// figures are fresh): each zone and each route reflector lost in turn. A drill stops the lost
// nodes' speakers of every family at once (stopNodes), waits for every family's survivors to
// converge, side by side, to the state the family's graph model says (drillTarget: the wait
// ends when it is reached, else on opts.Stable), records the phase, then starts the stopped
// speakers again with the same configuration and waits until every family is back in its fresh
// state (every session, and each node's routes as fresh) before the next drill. The speakers run
// once for the whole run: nothing is rendered or set up again between drills.
func runDrills(ctx context.Context, fleets []famFleet, r famRun, rep *Report, fresh []*Phase, opts Options) error {
	for _, fl := range fleets {
		if _, ok := fl.f.(restarter); !ok {
			return inputErr("%s speakers cannot be started again: no drills", opts.Speaker)
		}
	}
	// each runs one phase per family side by side.
	each := func(down []bool, names []string, start time.Time, routes func(k, i int) int) ([]*Phase, error) {
		out := make([]*Phase, len(fleets))
		errs := make([]error, len(fleets))
		var wg sync.WaitGroup
		for k, fl := range fleets {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d := or(down, r.model.FamilyDown(fl.fam, nil))
				m, err := r.model.PropagateFamily(fl.fam, down)
				if err != nil {
					errs[k] = err
					return
				}
				want := drillTarget(fl, d, m, func(i int) int { return routes(k, i) })
				out[k], errs[k] = familyPhase(ctx, fl, r, down, names, start, want, opts)
			}()
		}
		wg.Wait()
		return out, errors.Join(errs...)
	}
	// After a drill the model's route counts are the target where they are whole numbers (the
	// model is exact for the plans' layouts); back from one, each node's fresh count.
	modelRoutes := func(down []bool) func(k, i int) int {
		ms := make([]*bgpmodel.Model, len(fleets))
		for k, fl := range fleets {
			ms[k], _ = r.model.PropagateFamily(fl.fam, down)
		}
		return func(k, i int) int {
			if ms[k] == nil {
				return -1
			}
			x := ms[k].Nodes[i].Routes
			if x != math.Trunc(x) {
				return -1
			}
			return int(x)
		}
	}
	freshRoutes := func(k, i int) int { return fresh[k].Nodes[i].Routes }
	masks, names := drillMasks(r.model, opts.DrillRRs)
	for d, m := range masks {
		logf(opts, "drill %d of %d: stopping %s", d+1, len(masks), strings.Join(names[d], ","))
		t := time.Now()
		if err := stopNodes(fleets, m); err != nil {
			return err
		}
		after, err := each(m, names[d], t, modelRoutes(m))
		if err != nil {
			return err
		}
		for k, fl := range fleets {
			fr := rep.Families[fl.fam.Key()]
			fr.Drills = append(fr.Drills, after[k])
		}
		t2 := time.Now()
		if err := restartNodes(ctx, fleets, m); err != nil {
			return err
		}
		back, err := each(nil, nil, t2, freshRoutes)
		if err != nil {
			return err
		}
		for k, fl := range fleets {
			if back[k].Summary.MissingPairs > 0 || !back[k].Summary.Converged {
				return fmt.Errorf("%s: after drill %s every speaker was started again, yet %d pairs miss (converged %v)",
					fl.fam, strings.Join(names[d], ","), back[k].Summary.MissingPairs, back[k].Summary.Converged)
			}
		}
		logf(opts, "drill %d of %d: %v (%v with the nodes lost, %v to come back)", d+1, len(masks),
			time.Since(t).Round(time.Millisecond), t2.Sub(t).Round(time.Millisecond), time.Since(t2).Round(time.Millisecond))
	}
	return nil
}

// sessionGate is a fleet whose speakers can hold their sessions toward one peer down and let
// them up again (BIRD's disable and enable of the protocols toward the peer).
// eachLostPeering calls f for every peering of every lost node (down) in the fleets that can hold
// sessions (sessionGate): the fleet's gate, the lost node and its address, and the peer.
func eachLostPeering(fleets []famFleet, down []bool, f func(g sessionGate, i int, addr netip.Addr, p speakerPeer)) {
	for _, fl := range fleets {
		g, ok := fl.f.(sessionGate)
		for i, d := range down {
			if !ok || !d || fl.nodes[i].absent {
				continue
			}
			for _, p := range fl.nodes[i].peers {
				f(g, i, fl.nodes[i].addr, p)
			}
		}
	}
}

type sessionGate interface {
	hold(i int, peer netip.Addr, down bool) error
}

// gateEntry is node's sessions toward peer in the fleet of g.
type gateEntry struct {
	g    sessionGate
	node int
	peer netip.Addr
}

// holdAll holds the sessions of entries down (or lets them up), every node's at once.
func holdAll(entries []gateEntry, down bool) error {
	errs := make([]error, len(entries))
	var wg sync.WaitGroup
	for k, e := range entries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := e.g.hold(e.node, e.peer, down); err != nil {
				errs[k] = fmt.Errorf("node %d toward %s: %w", e.node, e.peer, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// untilSecond sleeps until d past the start of monotonic second sec.
func untilSecond(ctx context.Context, sec int64, d time.Duration) error {
	wait := time.Duration(sec)*time.Second + d - monotonic()
	if wait <= 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(wait):
		return nil
	}
}

// openInOrder lets held sessions up so that each is opened by one end only, whose sessions are
// in first (the other end's in second). BIRD 1.6 with graceful restart (confd's template) takes
// any new connection from a peer whose session is established for that peer restarting: it drops
// the session (keeping its routes as stale) and takes the new connection. So when both ends of a
// session connect at about the same time, each end's connection can drop the session the other's
// just brought up, over and over: a fresh 30-node lab took 16 to 42 s to converge, a drill's
// stopped speakers 1.5 to 37 s to come back, while both ends connected 2 s (confd's connect
// delay) after the same moment. BIRD 1.6's timers count whole seconds of the monotonic clock:
// first is let up early in a second S, its ends connect in S+2; second in S+1: its ends listen
// from then on and would connect in S+3, by when the other end's connection is up and they no
// longer try. The second ends are let up in the second after the last first end is up (each
// BIRD has taken its command when holdAll returns): with hundreds of sessions on a loaded machine
// letting the first ends up takes more than a second (a 100-node lab at a load average of 70 to
// 140), and a second end let up in the second its first end was would connect with it.
func openInOrder(ctx context.Context, first, second []gateEntry) error {
	if now := monotonic(); now%time.Second > 300*time.Millisecond {
		if err := untilSecond(ctx, int64(now/time.Second)+1, 10*time.Millisecond); err != nil {
			return err
		}
	}
	if err := holdAll(first, false); err != nil {
		return err
	}
	s := int64(monotonic() / time.Second)
	if err := untilSecond(ctx, s+1, 10*time.Millisecond); err != nil {
		return err
	}
	return holdAll(second, false)
}

// openOrder collects sessions to hold down and open again from one end (openInOrder): the end of
// the lower-indexed node opens.
type openOrder struct{ all, first, second []gateEntry }

// add puts node i's sessions toward peer, node j's address, in the order.
func (o *openOrder) add(g sessionGate, i, j int, peer netip.Addr) {
	e := gateEntry{g, i, peer}
	o.all = append(o.all, e)
	if i < j {
		o.first = append(o.first, e)
	} else {
		o.second = append(o.second, e)
	}
}

// open holds every session of the order down, then lets them up in order.
func (o *openOrder) open(ctx context.Context) error {
	if err := holdAll(o.all, true); err != nil {
		return err
	}
	return openInOrder(ctx, o.first, o.second)
}

// restartNodes starts the stopped speakers of the nodes of down again, every family's at once,
// with each of their sessions opened by one end (openInOrder): the peers' sessions toward them are
// held down before they start, theirs once they run, and then let up, the restarted end first
// (of two restarted ends, the one first in the fleet). How the speakers come back is no part of a
// drill's figures: runDrills waits for the fresh state before the next drill.
func restartNodes(ctx context.Context, fleets []famFleet, down []bool) error {
	var peers, restarted, first, second []gateEntry
	eachLostPeering(fleets, down, func(g sessionGate, i int, addr netip.Addr, p speakerPeer) {
		mine, theirs := gateEntry{g, i, p.addr}, gateEntry{g, p.idx, addr}
		restarted = append(restarted, mine)
		switch {
		case !down[p.idx]:
			peers = append(peers, theirs)
			first, second = append(first, mine), append(second, theirs)
		case i < p.idx:
			first = append(first, mine)
		default:
			second = append(second, mine)
		}
	})
	if err := holdAll(peers, true); err != nil {
		return err
	}
	errs := make([][]error, len(fleets))
	var wg sync.WaitGroup
	for k, fl := range fleets {
		errs[k] = make([]error, len(down))
		rs := fl.f.(restarter)
		for i, d := range down {
			if d && !fl.nodes[i].absent {
				wg.Add(1)
				go func() { defer wg.Done(); errs[k][i] = rs.restart(ctx, i) }()
			}
		}
	}
	wg.Wait()
	var all []error
	for _, e := range errs {
		all = append(all, e...)
	}
	if err := errors.Join(all...); err != nil {
		return err
	}
	if err := holdAll(restarted, true); err != nil {
		return err
	}
	return openInOrder(ctx, first, second)
}

func downSuffix(names []string) string {
	if len(names) == 0 {
		return ""
	}
	return " without " + strings.Join(names, ",")
}

// runSpeakerFamilies runs the gobgp or bird speakers of topo, one fleet per family: IPv4 on the
// 127.net addresses, IPv6 on Address6 (added to lo for the run) with bird6 or GoBGP's IPv6 unicast.
func runSpeakerFamilies(ctx context.Context, policy string, topo *bgpmodel.Topology, rrs []string, opts Options) (*Report, error) {
	down, downNames, err := failureMask(topo, rrs, opts)
	if err != nil {
		return nil, err
	}
	n := len(topo.Nodes)
	ids := make([]netip.Addr, n)
	for i := range ids {
		ids[i] = Address(opts.Net, i)
	}
	run := famRun{policy: policy, model: topo, rrs: rrs, down: down, downNames: downNames}
	var fleets []famFleet
	closeAll := func() {
		for _, fl := range fleets {
			fl.f.close()
		}
		if run.cleanup != nil {
			run.cleanup()
		}
	}
	fams := topo.Families()
	for _, fam := range extender.AllFamilies {
		if !fams.Has(fam) {
			continue
		}
		addrs, blocks := make([]netip.Addr, n), make([]netip.Prefix, n)
		for i := range addrs {
			if fam == extender.FamilyIPv6 {
				addrs[i], blocks[i] = Address6(opts.Net, i), Block6(i)
			} else {
				addrs[i], blocks[i] = Address(opts.Net, i), Block(i)
			}
		}
		nodes := familyNodes(topo, fam, addrs, blocks, ids)
		var f fleet
		switch {
		case opts.Speaker == SpeakerBIRD && fam == extender.FamilyIPv6:
			bin, err := exec.LookPath("bird6")
			if err != nil {
				closeAll()
				return nil, fmt.Errorf("bird6 not found (%v): Debian's bird package ships it (make tools)", err)
			}
			o := opts
			o.BIRD = bin
			f, err = newBIRDFleet(nodes, o)
			if err != nil {
				closeAll()
				return nil, err
			}
			bf := f.(*birdFleet)
			bf.tag, bf.pool = "6", podPool6
		case opts.Speaker == SpeakerBIRD:
			f, err = newBIRDFleet(nodes, opts)
		default:
			f, err = newGoBGPFleet(nodes, opts)
			if err == nil && fam == extender.FamilyIPv6 {
				f.(*gobgpFleet).v6 = true
			}
		}
		if err != nil {
			closeAll()
			return nil, err
		}
		if fam == extender.FamilyIPv6 {
			var lo []netip.Addr
			for i, nd := range nodes {
				if nd.absent {
					continue
				}
				lo = append(lo, nd.addr)
				if nd.clusterID != "" && opts.Speaker == SpeakerGoBGP {
					lo = append(lo, Address6(opts.Net, shadowBase+i))
				}
			}
			cleanup, err := loopback6(lo)
			if err != nil {
				f.close()
				closeAll()
				return nil, err
			}
			run.cleanup = cleanup
		}
		fleets = append(fleets, famFleet{fam: fam, f: f, topo: topo, nodes: nodes})
	}
	logf(opts, "starting %s speakers in %s: %d nodes, %d sessions (family-blind)", opts.Speaker, fams, n, topo.SessionCount(nil))
	return runFamilies(ctx, fleets, run, opts)
}

// loopback6 adds the IPv6 addresses to lo (as /128s, in the host's namespace) and returns what
// removes them.
func loopback6(addrs []netip.Addr) (func(), error) {
	ip, err := exec.LookPath("ip")
	if err != nil {
		return nil, fmt.Errorf("IPv6 speakers on loopback need iproute2's ip: %v", err)
	}
	var add, del []string
	for _, a := range addrs {
		add = append(add, fmt.Sprintf("addr add %s/128 dev lo nodad", a))
		del = append(del, fmt.Sprintf("addr del %s/128 dev lo", a))
	}
	cleanup := func() {
		cmd := exec.Command(ip, "-force", "-batch", "-") // every line, whatever fails
		cmd.Stdin = strings.NewReader(strings.Join(del, "\n") + "\n")
		_ = cmd.Run()
	}
	if err := (&netLab{ip: ip}).batch("", add); err != nil {
		cleanup()
		return nil, fmt.Errorf("adding IPv6 addresses to lo (root): %w", err)
	}
	return cleanup, nil
}
