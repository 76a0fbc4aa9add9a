package bgpverify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
)

// Lab is a live calico speaker for tests: one BIRD per node in a network namespace of its own,
// configured by Calico's confd from a kube-apiserver the caller keeps changing (the product's own:
// it needs Calico's CRDs, an IP pool and the BGPConfiguration). Node i has the address
// NodeAddress(i) and the pod block Block(i); the caller writes them on the Nodes
// (projectcalico.org/IPv4Address, spec.podCIDR). Sync renders again and reconfigures the BIRDs
// whose configuration changed; Kill and Revive stop and start one node's BIRD.
type Lab struct {
	names []string
	index map[string]int
	// byAddr: each node's index by its address (NodeAddress).
	byAddr map[netip.Addr]int
	confd  string
	etc    string
	env    []string
	// kubeconfig is the API server's (in env as well).
	kubeconfig string
	dir        string
	dirs       []string
	cfgs       [][]byte // the bird.cfg each running BIRD last loaded
	f          *birdFleet
	// mu holds Sync, Kill and Revive apart: a test kills a BIRD while its confd loop syncs.
	mu   sync.Mutex
	dead map[int]bool
	// silent: nodes whose calico-node is stopped (Silence): ReportStatuses leaves their
	// CalicoNodeStatus as it was, so it goes stale as calico-node's own does.
	silent sync.Map
	// What Sync configured (under rmu), and the Follow loop's rounds (under followMu).
	rmu         sync.Mutex
	reconfigs   []Reconfigure
	followMu    *sync.Mutex
	followErr   func() error
	rounds      int
	roundMax    time.Duration
	roundMaxErr error
	roundTotal  time.Duration
}

// StartLab creates the namespaces and the folders for names (nothing runs until Sync).
func StartLab(kubeconfig string, names []string) (*Lab, error) {
	return startLab(kubeconfig, names, "", "")
}

// startLab is StartLab with the confd and bird binaries given (as FindConfd and FindBIRD take them).
func startLab(kubeconfig string, names []string, confdPath, birdPath string) (*Lab, error) {
	confd, err := FindConfd(confdPath)
	if err != nil {
		return nil, err
	}
	etc, err := confdEtc()
	if err != nil {
		return nil, err
	}
	bin, err := FindBIRD(birdPath)
	if err != nil {
		return nil, err
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		return nil, fmt.Errorf("%w: iproute2's ip not found (%v)", ErrNoNetns, err)
	}
	dir, err := os.MkdirTemp("/tmp", fmt.Sprintf("rrc%d-", os.Getpid()))
	if err != nil {
		return nil, err
	}
	l := &Lab{names: names, index: map[string]int{}, byAddr: map[netip.Addr]int{}, confd: confd, etc: etc, dir: dir, dead: map[int]bool{}, kubeconfig: kubeconfig,
		env: []string{"DATASTORE_TYPE=kubernetes", "KUBECONFIG=" + kubeconfig, "USE_POD_CIDR=true",
			"NAMESPACE=" + ConfdNamespace}} // where confd reads the Secrets of BGPPeer passwords
	addrs := make([]netip.Prefix, len(names))
	for i, n := range names {
		l.index[n] = i
		addrs[i] = NodeAddress(i)
		l.byAddr[addrs[i].Addr()] = i
	}
	lab, err := newNetLab(ip, len(names))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	l.f = &birdFleet{bin: bin, dir: dir, lab: lab, filter: " where net ~ " + podPool.String(),
		nodes: make([]speakerNode, len(names)), configs: make([]string, len(names)),
		procs: make([]*exec.Cmd, len(names)), conns: make([]*birdConn, len(names))}
	for i, n := range names {
		l.f.nodes[i] = speakerNode{name: n, addr: addrs[i].Addr()}
	}
	if err := lab.setup(addrs, nil); err != nil {
		l.Close()
		return nil, fmt.Errorf("%w: %v", ErrNoNetns, err)
	}
	l.cfgs = make([][]byte, len(names))
	return l, nil
}

// Index is node name's index (its address and block), -1 when unknown.
func (l *Lab) Index(name string) int {
	if i, ok := l.index[name]; ok {
		return i
	}
	return -1
}

// Sync has confd render every node's configuration, starts the BIRDs that are not running (but
// those killed) and has the running ones whose bird.cfg changed load it (`configure`).
func (l *Lab) Sync(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	dirs, err := renderAll(ctx, l.confd, l.etc, l.dir, l.names, l.env)
	if err != nil {
		return err
	}
	l.dirs = dirs
	return l.apply(ctx)
}

// apply (under mu, after a first render) starts the BIRDs that are not running (but those
// killed) and has the running ones whose bird.cfg changed since they last loaded it load it.
func (l *Lab) apply(ctx context.Context) error {
	if err := dropEmptyKrtTunnel(l.dirs); err != nil {
		return err
	}
	var errs []error
	for i := range l.names {
		l.f.configs[i] = filepath.Join(l.dirs[i], "bird.cfg")
		cfg, err := os.ReadFile(l.f.configs[i])
		if err != nil {
			return err
		}
		l.f.mu.Lock()
		c := l.f.conns[i]
		l.f.mu.Unlock()
		switch {
		case l.dead[i]:
		case c == nil:
			if err := l.startNode(ctx, i); err != nil {
				errs = append(errs, err)
				continue
			}
			l.setConfig(i, cfg)
		case !bytes.Equal(cfg, l.cfgs[i]):
			if out, err := l.configure(c, i); err != nil {
				errs = append(errs, fmt.Errorf("bird %s: configure: %v: %s", l.names[i], err, out))
				continue
			}
			l.rmu.Lock()
			l.reconfigs = append(l.reconfigs, diffProtocols(l.names[i], l.cfgs[i], cfg))
			l.rmu.Unlock()
			l.setConfig(i, cfg)
		}
	}
	return errors.Join(errs...)
}

// setConfig (under mu) records cfg as node i's loaded bird.cfg, and its neighbors as the node's
// peers in the fleet: a session of two running BIRDs that stays short of Established is then
// opened again from one end (birdFleet.watch, as the speakers' fleets do). Two BIRD 1.6 ends that
// connect at about the same time can drop each other's session over and over with graceful
// restart (OpenInOrder); without this, on a machine at load 30, two nodes of
// TestBGPHealthOnRealBIRD's lab had no route to each other for the 2 minutes it waits (2026-12-02).
func (l *Lab) setConfig(i int, cfg []byte) {
	l.cfgs[i] = cfg
	var peers []speakerPeer
	for _, m := range neighborLine.FindAllSubmatch(cfg, -1) {
		a, err := netip.ParseAddr(string(m[1]))
		if j, ok := l.byAddr[a]; err == nil && ok && j != i {
			peers = append(peers, speakerPeer{idx: j, addr: a})
		}
	}
	l.f.mu.Lock()
	defer l.f.mu.Unlock()
	l.f.nodes[i].peers = peers
	if l.f.peerIDs != nil {
		l.f.peerIDs[i] = nil // watch maps the protocols again
	}
}

// configure has node i's BIRD load its configuration. A node's confd watch (Follow) may write
// bird_ipam.cfg again between dropEmptyKrtTunnel and the configure, which Debian's BIRD then
// refuses (krt_tunnel is an attribute of Calico's fork only) and keeps its old configuration: a
// round late on that node (five nodes in one 30-node history). The line is dropped again and the
// configure retried, twice at most.
func (l *Lab) configure(c *birdConn, i int) (string, error) {
	out, err := c.command("configure")
	for try := 0; err != nil && try < 2 && strings.Contains(out+err.Error(), "bird_ipam.cfg"); try++ {
		if derr := dropEmptyKrtTunnel(l.dirs[i : i+1]); derr != nil {
			return out, derr
		}
		out, err = c.command("configure")
	}
	return out, err
}

func (l *Lab) startNode(ctx context.Context, i int) error {
	f := l.f
	logFile, err := os.Create(filepath.Join(f.dir, fmt.Sprintf("n%d.log", i)))
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := f.lab.command(i, f.bin, "-f", "-c", f.configs[i], "-s", f.socket(i), "-P", filepath.Join(f.dir, fmt.Sprintf("n%d.pid", i)))
	cmd.Dir = filepath.Dir(f.configs[i])
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("bird %s: %v", l.names[i], err)
	}
	// A BIRD that rejects its configuration exits at once: say so without waiting (with a Follow
	// loop, confd may rewrite bird_ipam.cfg between dropEmptyKrtTunnel and the start; the next
	// round strips it again and starts the BIRD).
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(f.dir, fmt.Sprintf("n%d.log", i)))
			return fmt.Errorf("bird %s exited at its start: %s", l.names[i], strings.TrimSpace(string(log)))
		default:
		}
		c, err := dialBIRD(f.socket(i))
		if err == nil {
			f.mu.Lock()
			f.procs[i], f.conns[i] = cmd, c
			f.mu.Unlock()
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			_ = cmd.Process.Kill()
			<-exited
			log, _ := os.ReadFile(filepath.Join(f.dir, fmt.Sprintf("n%d.log", i)))
			return fmt.Errorf("bird %s did not start: %v: %s", l.names[i], err, strings.TrimSpace(string(log)))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// loadedConfigs returns the bird.cfg each node's BIRD last loaded (by node index; nil for a node
// never started).
func (l *Lab) loadedConfigs() [][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.cfgs)
}

// Reconfigures returns the configures Sync gave so far.
func (l *Lab) Reconfigures() []Reconfigure {
	l.rmu.Lock()
	defer l.rmu.Unlock()
	return slices.Clone(l.reconfigs)
}

// Kill stops node name's BIRD (SIGKILL: a crash, no Cease to its peers) until Revive.
func (l *Lab) Kill(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := l.index[name]
	l.dead[i] = true
	l.f.mu.Lock()
	cmd, c := l.f.procs[i], l.f.conns[i]
	l.f.procs[i], l.f.conns[i] = nil, nil
	l.f.mu.Unlock()
	if c != nil {
		c.close()
	}
	if cmd != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	_ = os.Remove(l.f.socket(i))
}

// Terminate stops the BIRDs of names together as calico-node's shutdown does (SIGTERM to every one
// first, then it waits for each to exit): each closes its sessions with a Cease ("Administrative
// shutdown"), so its peers withdraw its routes at once, graceful restart does not apply. A BIRD
// still running after birdStopGrace is killed. They stay stopped until Revive.
func (l *Lab) Terminate(names ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var procs []*exec.Cmd
	for _, name := range names {
		i := l.index[name]
		l.dead[i] = true
		l.f.mu.Lock()
		cmd, c := l.f.procs[i], l.f.conns[i]
		l.f.procs[i], l.f.conns[i] = nil, nil
		l.f.mu.Unlock()
		if c != nil {
			c.close()
		}
		if cmd != nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			procs = append(procs, cmd)
		}
	}
	for _, cmd := range procs {
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(birdStopGrace):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	for _, name := range names {
		_ = os.Remove(l.f.socket(l.index[name]))
	}
}

// Silence stops (true) or resumes (false) the status reports of node name in ReportStatuses: its
// calico-node is stopped, so its CalicoNodeStatus is not updated any more.
func (l *Lab) Silence(name string, silent bool) {
	if silent {
		l.silent.Store(name, true)
	} else {
		l.silent.Delete(name)
	}
}

// Revive lets the next Sync start node name's BIRD again.
func (l *Lab) Revive(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.dead, l.index[name])
}

// Running reports whether node name's BIRD runs.
func (l *Lab) Running(name string) bool {
	l.f.mu.Lock()
	defer l.f.mu.Unlock()
	return l.f.conns[l.index[name]] != nil
}

var labPeerName = regexp.MustCompile(`^(Global|Node|Mesh)_(.+)$`)

// Peers answers as calico-node's status reporter does for a CalicoNodeStatus of class BGP: BIRD's
// protocol table (`show protocols` on node name's control socket), one peer per BGP protocol
// named Global_, Node_ or Mesh_<address>, its state the table's info column. A BIRD that does not
// answer gives no peers (calico-node then writes an empty status.bgp).
func (l *Lab) Peers(name string) []apiv3.CalicoNodePeer {
	i := l.index[name]
	c, err := dialBIRD(l.f.socket(i))
	if err != nil {
		return nil
	}
	defer c.close()
	out, err := c.command("show protocols")
	if err != nil {
		return nil
	}
	types := map[string]apiv3.BGPPeerType{"Global": apiv3.BGPPeerTypeGlobalPeer, "Node": apiv3.BGPPeerTypeNodePeer, "Mesh": apiv3.BGPPeerTypeNodeMesh}
	var peers []apiv3.CalicoNodePeer
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[1] != "BGP" {
			continue
		}
		m := labPeerName.FindStringSubmatch(f[0])
		if m == nil {
			continue
		}
		peers = append(peers, apiv3.CalicoNodePeer{PeerIP: strings.ReplaceAll(m[2], "_", "."), Type: types[m[1]],
			State: apiv3.BGPSessionState(f[5]), Since: f[4]})
	}
	return peers
}

// MissingPairs returns the ordered pairs (a, b) of nodes whose BIRDs run where a has no route to
// b's pod block.
func (l *Lab) MissingPairs(ctx context.Context) ([]string, error) {
	var live []int
	for i, n := range l.names {
		if l.Running(n) {
			live = append(live, i)
		}
	}
	var out []string
	for _, i := range live {
		st, err := l.f.poll(ctx, i)
		if err != nil {
			return nil, fmt.Errorf("bird %s: %v", l.names[i], err)
		}
		for _, j := range live {
			if j != i && !slices.Contains(st.blocks, Block(j)) {
				out = append(out, l.names[i]+"->"+l.names[j])
			}
		}
	}
	return out, nil
}

// Reopens is how many sessions the lab has opened again from one end so far (setConfig; the
// watch runs on MissingPairs' and the Sampler's reads).
func (l *Lab) Reopens() int { return int(l.f.reopens.Load()) }

// Close stops every BIRD and deletes the namespaces and the folder.
func (l *Lab) Close() { l.f.close() }

// neighborLine is a BGP protocol's peer in a bird.cfg confd rendered.
var neighborLine = regexp.MustCompile(`(?m)^\s*neighbor\s+([0-9a-fA-F.:]+)\s+as\b`)

// OpenInOrder holds every BGP session of the running BIRDs down and lets them up again, each
// opened by one end only (openInOrder, the lower-indexed node first): two BIRD 1.6 ends with
// graceful restart that connect at once can drop each other's sessions for minutes, which a
// fresh 100-node mesh (4,950 sessions) did not get past in 3 minutes. Call it after the first
// Sync, before Follow. The sessions are the neighbors of each loaded bird.cfg (setConfig).
func (l *Lab) OpenInOrder(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var o openOrder
	for i := range l.names {
		if l.dead[i] || l.cfgs[i] == nil {
			continue
		}
		for _, p := range l.f.nodes[i].peers {
			if !l.dead[p.idx] && l.cfgs[p.idx] != nil {
				o.add(l.f, i, p.idx, p.addr)
			}
		}
	}
	return o.open(ctx)
}
