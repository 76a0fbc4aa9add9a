package bgpverify

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"sync"

	api "github.com/osrg/gobgp/v3/api"
	gobgplog "github.com/osrg/gobgp/v3/pkg/log"
	"github.com/osrg/gobgp/v3/pkg/server"
	apb "google.golang.org/protobuf/types/known/anypb"
)

// gobgpFleet runs one in-process GoBGP server per node.
type gobgpFleet struct {
	nodes   []speakerNode
	opts    Options
	mu      sync.Mutex
	servers []*server.BgpServer
}

func newGoBGPFleet(nodes []speakerNode, opts Options) (fleet, error) {
	return &gobgpFleet{nodes: nodes, opts: opts, servers: make([]*server.BgpServer, len(nodes))}, nil
}

var ipv4Unicast = &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}

func (f *gobgpFleet) start(ctx context.Context) error {
	// Every server listens before any connects.
	for i, nd := range f.nodes {
		s := server.NewBgpServer(server.LoggerOption(quietLogger{}))
		go s.Serve()
		f.mu.Lock()
		f.servers[i] = s
		f.mu.Unlock()
		err := s.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
			Asn: f.opts.ASN, RouterId: nd.addr.String(), ListenPort: int32(f.opts.Port), ListenAddresses: []string{nd.addr.String()},
		}})
		if err != nil {
			return fmt.Errorf("gobgp %s on %s:%d: %v (binding port %d needs root or CAP_NET_BIND_SERVICE)", nd.name, nd.addr, f.opts.Port, err, f.opts.Port)
		}
	}
	for i, nd := range f.nodes {
		s := f.servers[i]
		for _, p := range nd.peers {
			peer := &api.Peer{
				Conf:      &api.PeerConf{NeighborAddress: p.addr.String(), PeerAsn: f.opts.ASN},
				Transport: &api.Transport{LocalAddress: nd.addr.String(), PassiveMode: p.passive, RemotePort: uint32(f.opts.Port)},
				Timers:    &api.Timers{Config: &api.TimersConfig{ConnectRetry: 5, HoldTime: 90, KeepaliveInterval: 30}},
				AfiSafis: []*api.AfiSafi{{
					Config:   &api.AfiSafiConfig{Family: ipv4Unicast, Enabled: true},
					AddPaths: &api.AddPaths{Config: &api.AddPathsConfig{Receive: true, SendMax: 255}},
				}},
			}
			// GoBGP prepends and checks the cluster list only on rr-client sessions, while BIRD
			// (Calico's daemon) prepends its cluster ID to every route it reflects and drops
			// looped routes on its rr-client sessions. A route reflector therefore treats all its
			// iBGP peers as clients here, same-cluster ones included, so that routes reflected
			// between same-cluster route reflectors carry the ID as they do in BIRD; configured
			// as Calico writes it, GoBGP passes them on again, projectcalico/calico#2735 does not
			// show and the paths per prefix explode. Which blocks arrive is then BIRD's for every
			// plan whose clients peer with all route reflectors of a cluster ID (every plan of the
			// planner); where they do not, GoBGP also tags a route reflector's own block with its
			// ID toward same-cluster peers and loses a superset of BIRD's routes. A same-cluster
			// route reflector may store more paths than BIRD (it gets its peers' own routes).
			// GoBGP sends at most 255 paths of one prefix to a peer (a uint8).
			if p.rrClient || nd.clusterID != "" {
				peer.RouteReflector = &api.RouteReflector{RouteReflectorClient: true, RouteReflectorClusterId: nd.clusterID}
			}
			if err := s.AddPeer(ctx, &api.AddPeerRequest{Peer: peer}); err != nil {
				return fmt.Errorf("gobgp %s: peer %s: %v", nd.name, p.addr, err)
			}
		}
		nlri, _ := apb.New(&api.IPAddressPrefix{Prefix: nd.block.Addr().String(), PrefixLen: uint32(nd.block.Bits())})
		origin, _ := apb.New(&api.OriginAttribute{Origin: 0})
		nh, _ := apb.New(&api.NextHopAttribute{NextHop: nd.addr.String()})
		_, err := s.AddPath(ctx, &api.AddPathRequest{TableType: api.TableType_GLOBAL, Path: &api.Path{
			Family: ipv4Unicast, Nlri: nlri, Pattrs: []*apb.Any{origin, nh},
		}})
		if err != nil {
			return fmt.Errorf("gobgp %s: originate %s: %v", nd.name, nd.block, err)
		}
	}
	return nil
}

func (f *gobgpFleet) server(i int) *server.BgpServer {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.servers[i]
}

func (f *gobgpFleet) poll(ctx context.Context, i int) (nodeState, error) {
	var st nodeState
	s := f.server(i)
	if s == nil {
		return st, errStopped
	}
	err := s.ListPath(ctx, &api.ListPathRequest{TableType: api.TableType_GLOBAL, Family: ipv4Unicast}, func(d *api.Destination) {
		if p, err := netip.ParsePrefix(d.Prefix); err == nil {
			st.blocks = append(st.blocks, p)
		}
		st.routes += len(d.Paths)
	})
	if err != nil {
		return st, err
	}
	err = s.ListPeer(ctx, &api.ListPeerRequest{}, func(p *api.Peer) {
		if p.State != nil && p.State.SessionState == api.PeerState_ESTABLISHED {
			st.established++
		}
	})
	return st, err
}

func (f *gobgpFleet) stop(i int) error {
	f.mu.Lock()
	s := f.servers[i]
	f.servers[i] = nil
	f.mu.Unlock()
	if s != nil {
		s.Stop()
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
