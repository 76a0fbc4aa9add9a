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
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
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
// each alone (a drill that would stop every node is left out).
func drillMasks(model *bgpmodel.Topology) (masks [][]bool, names [][]string) {
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
	for r := range model.Nodes {
		if model.IsRR(r) {
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
			d := or(down, r.model.FamilyDown(fl.fam, nil))
			ph, err := converge(ctx, fl.f, fl.topo, fl.nodes, d, start, opts)
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
			logf(opts, "%s%s: %d missing pairs (model %d)", fl.fam, downSuffix(names), ph.Summary.MissingPairs, ph.Summary.ModelMissingPairs)
			out[k] = ph
		}
		return out, nil
	}
	stop := func(down []bool) error {
		for _, fl := range fleets {
			for i, d := range down {
				if d && !fl.nodes[i].absent {
					if err := fl.f.stop(i); err != nil {
						return err
					}
				}
			}
		}
		return nil
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
		masks, names := drillMasks(r.model)
		for d, m := range masks {
			logf(opts, "drill %d of %d: stopping %s", d+1, len(masks), strings.Join(names[d], ","))
			t := time.Now()
			if err := stop(m); err != nil {
				return nil, err
			}
			after, err := phases(m, names[d], t)
			if err != nil {
				return nil, err
			}
			for k, fl := range fleets {
				fr := rep.Families[fl.fam.Key()]
				fr.Drills = append(fr.Drills, after[k])
			}
			t = time.Now()
			for _, fl := range fleets {
				rs, ok := fl.f.(restarter)
				if !ok {
					return nil, inputErr("%s speakers cannot be started again: no drills", opts.Speaker)
				}
				for i, down := range m {
					if down {
						if err := rs.restart(ctx, i); err != nil {
							return nil, err
						}
					}
				}
			}
			back, err := phases(nil, nil, t)
			if err != nil {
				return nil, err
			}
			for k, fl := range fleets {
				if back[k].Summary.MissingPairs > 0 || !back[k].Summary.Converged {
					return nil, fmt.Errorf("%s: after drill %s every speaker was started again, yet %d pairs miss (converged %v)",
						fl.fam, strings.Join(names[d], ","), back[k].Summary.MissingPairs, back[k].Summary.Converged)
				}
			}
		}
	}
	if r.down != nil {
		logf(opts, "stopping %d speakers: %s", len(r.downNames), strings.Join(r.downNames, ","))
		t := time.Now()
		if err := stop(r.down); err != nil {
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
