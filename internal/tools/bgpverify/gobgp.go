package bgpverify

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	gobgplog "github.com/osrg/gobgp/v3/pkg/log"
	"github.com/osrg/gobgp/v3/pkg/server"
	"google.golang.org/protobuf/proto"
	apb "google.golang.org/protobuf/types/known/anypb"
)

// How GoBGP is made to carry routes as BIRD does with Calico's configuration (the graph model's
// rules, internal/bgpmodel/model.go):
//
//   - BIRD prepends its cluster ID to every route it reflects and drops looped routes on its
//     rr-client sessions; GoBGP prepends and checks the cluster list only on sessions configured
//     as rr-client. A route reflector therefore treats all its iBGP peers as clients here,
//     same-cluster ones included, so that routes reflected between same-cluster route reflectors
//     carry the ID as they do in BIRD (configured as Calico writes it, GoBGP passes them on again,
//     projectcalico/calico#2735 does not show and the paths per prefix explode).
//   - BIRD sends a node's own block with no cluster list; GoBGP tags every route it sends on an
//     rr-client session, its own included, so a route reflector's own block would carry its
//     cluster ID to the other route reflectors and be dropped by every route reflector of that ID
//     (DualPlane's racks of one plane share an ID: GoBGP lost 446 pairs where BIRD lost none).
//     So a route reflector does not send its own block to route reflectors: an origin speaker
//     beside it (its "shadow", on its own address, with the route reflector's router ID so that
//     ORIGINATOR_ID is the route reflector's and the route reflector drops its block coming back)
//     sends it untagged to each of them over a session configured as theirs to the route
//     reflector; the shadow accepts nothing and stops when its route reflector stops.
//   - GoBGP sends at most 255 paths of one prefix to a peer (a uint8).
//
// A same-cluster route reflector may store a few more paths than BIRD (it reflects its peer's own
// block to its same-cluster peers, which store it and pass it no further); which blocks arrive is
// BIRD's (TestSpeakersAgree).

// gobgpFleet runs one in-process GoBGP server per node, and one shadow per route reflector that
// peers with route reflectors.
type gobgpFleet struct {
	nodes []speakerNode
	opts  Options
	// v6: the fleet carries IPv6 unicast (speakers on IPv6 addresses, Address6), not IPv4.
	v6      bool
	mu      sync.Mutex
	servers []*server.BgpServer
	shadows []*server.BgpServer // by node index; nil for nodes without one
	// down: since when each session (node index, neighbor address) has been seen not
	// Established, for resetStuck.
	down map[stuckKey]time.Time
	// resetAt: when each session (its two addresses, lower first) was last reset, so that its
	// two ends, each seeing it stuck, do not reset it twice in a row (four resets colliding).
	resetAt map[[2]string]time.Time
	// peerConf: each server's peers as added, so that resetStuck can add them again.
	peerConf map[peerKey]*api.Peer
}

type peerKey struct {
	server *server.BgpServer
	remote string
}

type stuckKey struct {
	node     int
	neighbor string
}

// stuckAfter is how long a session may stay short of Established before both of its ends are
// reset (resetStuck).
const stuckAfter = 30 * time.Second

func newGoBGPFleet(nodes []speakerNode, opts Options) (fleet, error) {
	if len(nodes) > shadowBase {
		return nil, inputErr("gobgp: at most %d nodes (the shadow speakers take the upper half of the address plan)", shadowBase)
	}
	return &gobgpFleet{nodes: nodes, opts: opts, servers: make([]*server.BgpServer, len(nodes)), shadows: make([]*server.BgpServer, len(nodes))}, nil
}

var (
	ipv4Unicast = &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}
	ipv6Unicast = &api.Family{Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_UNICAST}
)

// family is the AFI-SAFI the fleet carries.
func (f *gobgpFleet) family() *api.Family {
	if f.v6 {
		return ipv6Unicast
	}
	return ipv4Unicast
}

// shadowBase is the first node index of the shadows' addresses: node i's shadow is at
// Address(net, shadowBase+i).
const shadowBase = 0x7f00

func shadowAddr(net, i int) netip.Addr { return Address(net, shadowBase+i) }

// shadow is node i's shadow's address in the fleet's family.
func (f *gobgpFleet) shadow(i int) netip.Addr {
	if f.v6 {
		return Address6(f.opts.Net, shadowBase+i)
	}
	return shadowAddr(f.opts.Net, i)
}

// rrPeers are the peers of node i that are route reflectors (they forward what they learn).
func (f *gobgpFleet) rrPeers(i int) []speakerPeer {
	if f.nodes[i].clusterID == "" {
		return nil
	}
	var out []speakerPeer
	for _, p := range f.nodes[i].peers {
		if f.nodes[p.idx].clusterID != "" {
			out = append(out, p)
		}
	}
	return out
}

func (f *gobgpFleet) newServer(ctx context.Context, name string, routerID, listen netip.Addr) (*server.BgpServer, error) {
	if !routerID.Is4() {
		return nil, fmt.Errorf("gobgp %s: router ID %s is not a 4-octet ID", name, routerID)
	}
	s := server.NewBgpServer(server.LoggerOption(quietLogger{}))
	go s.Serve()
	err := s.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
		Asn: f.opts.ASN, RouterId: routerID.String(), ListenPort: int32(f.opts.Port), ListenAddresses: []string{listen.String()},
	}})
	if err != nil {
		s.Stop()
		return nil, fmt.Errorf("gobgp %s on %s:%d: %v (binding port %d needs root or CAP_NET_BIND_SERVICE)", name, listen, f.opts.Port, err, f.opts.Port)
	}
	return s, nil
}

func (f *gobgpFleet) start(ctx context.Context) error {
	// Every server listens before any connects.
	for i, nd := range f.nodes {
		if nd.absent {
			continue
		}
		s, err := f.newServer(ctx, nd.name, nd.routerIDOrAddr(), nd.addr)
		if err != nil {
			return err
		}
		f.mu.Lock()
		f.servers[i] = s
		f.mu.Unlock()
		if len(f.rrPeers(i)) > 0 {
			sh, err := f.newServer(ctx, nd.name+" (shadow)", nd.routerIDOrAddr(), f.shadow(i))
			if err != nil {
				return err
			}
			f.mu.Lock()
			f.shadows[i] = sh
			f.mu.Unlock()
		}
	}
	for i, nd := range f.nodes {
		if nd.absent {
			continue
		}
		s := f.servers[i]
		for _, p := range nd.peers {
			// As Calico configures it, but a route reflector treats every peer as a client (see
			// the top of this file).
			if err := f.addPeer(ctx, s, nd.addr, p.addr, p.passive, p.rrClient || nd.clusterID != "", nd.clusterID); err != nil {
				return fmt.Errorf("gobgp %s: %v", nd.name, err)
			}
			if sh := f.shadows[p.idx]; sh != nil && f.nodes[p.idx].clusterID != "" && nd.clusterID != "" {
				// The peer's shadow brings its block: this node takes it as it takes the
				// peer's routes; the shadow connects.
				if err := f.addPeer(ctx, s, nd.addr, f.shadow(p.idx), true, true, nd.clusterID); err != nil {
					return fmt.Errorf("gobgp %s: %v", nd.name, err)
				}
			}
		}
		if err := f.originate(ctx, s, nd); err != nil {
			return err
		}
		if sh := f.shadows[i]; sh != nil {
			if err := f.startShadow(ctx, s, sh, i); err != nil {
				return err
			}
		}
	}
	return nil
}

func (f *gobgpFleet) addPeer(ctx context.Context, s *server.BgpServer, local, remote netip.Addr, passive, rrClient bool, clusterID string) error {
	peer := &api.Peer{
		Conf:      &api.PeerConf{NeighborAddress: remote.String(), PeerAsn: f.opts.ASN},
		Transport: &api.Transport{LocalAddress: local.String(), PassiveMode: passive, RemotePort: uint32(f.opts.Port)},
		// IdleHoldTimeAfterReset: GoBGP's default (30 s) equals stuckAfter, so a reset session was
		// reset again before it left Idle, forever (make test-all, DualPlane at 300 nodes).
		Timers: &api.Timers{Config: &api.TimersConfig{ConnectRetry: 5, HoldTime: 90, KeepaliveInterval: 30, IdleHoldTimeAfterReset: 1}},
		AfiSafis: []*api.AfiSafi{{
			Config:   &api.AfiSafiConfig{Family: f.family(), Enabled: true},
			AddPaths: &api.AddPaths{Config: &api.AddPathsConfig{Receive: true, SendMax: 255}},
		}},
	}
	if rrClient {
		peer.RouteReflector = &api.RouteReflector{RouteReflectorClient: true, RouteReflectorClusterId: clusterID}
	}
	if err := s.AddPeer(ctx, &api.AddPeerRequest{Peer: peer}); err != nil {
		return fmt.Errorf("peer %s: %v", remote, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.peerConf == nil {
		f.peerConf = map[peerKey]*api.Peer{}
	}
	f.peerConf[peerKey{s, remote.String()}] = peer
	return nil
}

func (f *gobgpFleet) originate(ctx context.Context, s *server.BgpServer, nd speakerNode) error {
	nlri, _ := apb.New(&api.IPAddressPrefix{Prefix: nd.block.Addr().String(), PrefixLen: uint32(nd.block.Bits())})
	origin, _ := apb.New(&api.OriginAttribute{Origin: 0})
	nh, _ := apb.New(&api.NextHopAttribute{NextHop: nd.addr.String()})
	if f.v6 {
		// IPv6 routes carry their next hop in MP_REACH_NLRI.
		nh, _ = apb.New(&api.MpReachNLRIAttribute{Family: ipv6Unicast, NextHops: []string{nd.addr.String()}, Nlris: []*apb.Any{nlri}})
	}
	_, err := s.AddPath(ctx, &api.AddPathRequest{TableType: api.TableType_GLOBAL, Path: &api.Path{
		Family: f.family(), Nlri: nlri, Pattrs: []*apb.Any{origin, nh},
	}})
	if err != nil {
		return fmt.Errorf("gobgp %s: originate %s: %v", nd.name, nd.block, err)
	}
	return nil
}

// startShadow makes node i's route reflector keep its own block from its route-reflector peers,
// and its shadow send it to them instead, accepting nothing.
func (f *gobgpFleet) startShadow(ctx context.Context, s, sh *server.BgpServer, i int) error {
	nd := f.nodes[i]
	var rrs []string
	for _, p := range f.rrPeers(i) {
		rrs = append(rrs, netip.PrefixFrom(p.addr, p.addr.BitLen()).String())
	}
	const set, pol = "route-reflectors", "own-block-by-shadow"
	err := s.AddDefinedSet(ctx, &api.AddDefinedSetRequest{DefinedSet: &api.DefinedSet{DefinedType: api.DefinedType_NEIGHBOR, Name: set, List: rrs}})
	if err == nil {
		err = s.AddPolicy(ctx, &api.AddPolicyRequest{Policy: &api.Policy{Name: pol, Statements: []*api.Statement{{
			Name:       pol,
			Conditions: &api.Conditions{NeighborSet: &api.MatchSet{Type: api.MatchSet_ANY, Name: set}, RouteType: api.Conditions_ROUTE_TYPE_LOCAL},
			Actions:    &api.Actions{RouteAction: api.RouteAction_REJECT},
		}}}})
	}
	if err == nil {
		err = s.AddPolicyAssignment(ctx, &api.AddPolicyAssignmentRequest{Assignment: &api.PolicyAssignment{
			Name: "global", Direction: api.PolicyDirection_EXPORT, Policies: []*api.Policy{{Name: pol}}, DefaultAction: api.RouteAction_ACCEPT,
		}})
	}
	// The shadow keeps its own block only (a global import policy also sees local paths).
	const deaf = "learn-nothing"
	if err == nil {
		err = sh.AddPolicy(ctx, &api.AddPolicyRequest{Policy: &api.Policy{Name: deaf, Statements: []*api.Statement{{
			Name:       deaf,
			Conditions: &api.Conditions{RouteType: api.Conditions_ROUTE_TYPE_INTERNAL},
			Actions:    &api.Actions{RouteAction: api.RouteAction_REJECT},
		}}}})
	}
	if err == nil {
		err = sh.AddPolicyAssignment(ctx, &api.AddPolicyAssignmentRequest{Assignment: &api.PolicyAssignment{
			Name: "global", Direction: api.PolicyDirection_IMPORT, Policies: []*api.Policy{{Name: deaf}}, DefaultAction: api.RouteAction_ACCEPT,
		}})
	}
	if err != nil {
		return fmt.Errorf("gobgp %s: own-block policy: %v", nd.name, err)
	}
	for _, p := range f.rrPeers(i) {
		if err := f.addPeer(ctx, sh, f.shadow(i), p.addr, false, false, ""); err != nil {
			return fmt.Errorf("gobgp %s (shadow): %v", nd.name, err)
		}
	}
	return f.originate(ctx, sh, nd)
}

func (f *gobgpFleet) server(i int) *server.BgpServer {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.servers[i]
}

// isShadow says whether addr is a shadow's (its sessions are not the plan's).
func (f *gobgpFleet) isShadow(addr string) bool {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return false
	}
	b := a.AsSlice()
	return int(b[len(b)-2])<<8|int(b[len(b)-1]) > shadowBase
}

func (f *gobgpFleet) poll(ctx context.Context, i int) (nodeState, error) {
	var st nodeState
	s := f.server(i)
	if s == nil {
		return st, errStopped
	}
	err := s.ListPath(ctx, &api.ListPathRequest{TableType: api.TableType_GLOBAL, Family: f.family()}, func(d *api.Destination) {
		if p, err := netip.ParsePrefix(d.Prefix); err == nil {
			st.blocks = append(st.blocks, p)
		}
		st.routes += len(d.Paths)
	})
	if err != nil {
		return st, err
	}
	var stuck []string
	now := time.Now()
	err = s.ListPeer(ctx, &api.ListPeerRequest{}, func(p *api.Peer) {
		if p.State == nil || f.isShadow(p.State.NeighborAddress) {
			return
		}
		key := stuckKey{i, p.State.NeighborAddress}
		f.mu.Lock()
		defer f.mu.Unlock()
		if p.State.SessionState == api.PeerState_ESTABLISHED {
			st.established++
			delete(f.down, key)
			return
		}
		if f.down == nil {
			f.down = map[stuckKey]time.Time{}
		}
		since, seen := f.down[key]
		switch {
		case !seen:
			f.down[key] = now
		case now.Sub(since) > stuckAfter:
			stuck = append(stuck, p.State.NeighborAddress)
			f.down[key] = now
		}
	})
	if err != nil {
		return st, err
	}
	for _, addr := range stuck {
		f.resetStuck(ctx, i, addr)
	}
	return st, nil
}

// resetStuck starts over both ends of node i's session with addr, which has stayed short of
// Established for stuckAfter. Under load GoBGP can leave a session half open: make test-all once saw
// 300 DualPlane speakers on two cores end their 150 s wait with 1,181 of 1,182 session ends
// Established (590 of 591 sessions), the one end never catching up, and CI once saw a 30-node run
// keep one session down through two resets.
//
// Each end's peer is deleted and added again, as configured: a new state machine in Idle. GoBGP's
// ResetPeer is no reset for an end short of Established: it queues a Cease that only an
// Established session sends, and the queue is dropped at the next state change, so an end stuck
// in OpenSent (whose hold time is 240 s) or Active stayed there. A session to a stopped speaker
// is started over too, harmlessly: it stays down.
func (f *gobgpFleet) resetStuck(ctx context.Context, i int, addr string) {
	pair := [2]string{f.nodes[i].addr.String(), addr}
	if pair[1] < pair[0] {
		pair[0], pair[1] = pair[1], pair[0]
	}
	f.mu.Lock()
	if f.resetAt == nil {
		f.resetAt = map[[2]string]time.Time{}
	}
	last, seen := f.resetAt[pair]
	if seen && time.Since(last) < stuckAfter/2 {
		f.mu.Unlock()
		return // its other end reset it a moment ago
	}
	f.resetAt[pair] = time.Now()
	f.mu.Unlock()
	logf(f.opts, "gobgp %s: session with %s not established for %v: starting both ends over", f.nodes[i].name, addr, stuckAfter)
	f.readdPeer(ctx, f.server(i), addr)
	for j, nd := range f.nodes {
		if nd.addr.String() == addr {
			f.readdPeer(ctx, f.server(j), f.nodes[i].addr.String())
		}
	}
}

// readdPeer deletes server s's peer remote and adds it again as it was first added.
func (f *gobgpFleet) readdPeer(ctx context.Context, s *server.BgpServer, remote string) {
	if s == nil {
		return
	}
	f.mu.Lock()
	conf := f.peerConf[peerKey{s, remote}]
	f.mu.Unlock()
	if conf == nil {
		return
	}
	if err := s.DeletePeer(ctx, &api.DeletePeerRequest{Address: remote}); err != nil {
		logf(f.opts, "gobgp: delete peer %s: %v", remote, err)
		return
	}
	if err := s.AddPeer(ctx, &api.AddPeerRequest{Peer: proto.Clone(conf).(*api.Peer)}); err != nil {
		logf(f.opts, "gobgp: add peer %s again: %v", remote, err)
	}
}

func (f *gobgpFleet) stop(i int) error {
	f.mu.Lock()
	s, sh := f.servers[i], f.shadows[i]
	f.servers[i], f.shadows[i] = nil, nil
	f.mu.Unlock()
	for _, srv := range []*server.BgpServer{sh, s} {
		if srv != nil {
			srv.Stop()
		}
	}
	return nil
}
func (f *gobgpFleet) close() { stopAll(len(f.nodes), f.stop) }

// stopAll stops the speakers 0..n-1 of a fleet in parallel and waits for all of them.
func stopAll(n int, stop func(int) error) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = stop(i)
		}()
	}
	wg.Wait()
}

var debugGoBGP = os.Getenv("RRV_DEBUG_GOBGP") != ""

func debugLog(level, msg string, f gobgplog.Fields) {
	if debugGoBGP {
		fmt.Fprintln(os.Stderr, level, msg, f)
	}
}

// quietLogger drops GoBGP's log lines.
type quietLogger struct{}

func (quietLogger) Panic(msg string, fields gobgplog.Fields) { panic(msg) }
func (quietLogger) Fatal(msg string, fields gobgplog.Fields) { panic(msg) }
func (quietLogger) Error(msg string, f gobgplog.Fields)      { debugLog("ERROR", msg, f) }
func (quietLogger) Warn(msg string, f gobgplog.Fields)       { debugLog("WARN", msg, f) }
func (quietLogger) Info(string, gobgplog.Fields)             {}
func (quietLogger) Debug(string, gobgplog.Fields)            {}
func (quietLogger) SetLevel(gobgplog.LogLevel)               {}
func (quietLogger) GetLevel() gobgplog.LogLevel              { return gobgplog.PanicLevel }
