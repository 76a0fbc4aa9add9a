package bgpverify

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// birdFleet runs one BIRD 1.6 process per node, each with its own router ID, listen address,
// control socket and pid file, all in one temporary directory.
type birdFleet struct {
	nodes []speakerNode
	opts  Options
	bin   string
	dir   string
	// The calico speaker: each BIRD runs configs[i] (confd's bird.cfg, in its own folder) in its
	// node's network namespace, and only routes matching filter (the pod blocks) are counted:
	// Calico's kernel and direct protocols also put the node's interface routes in the table.
	lab     *netLab
	configs []string
	filter  string
	// tag names this fleet's files beside another's in the same folder ("6": the bird6 fleet of
	// a dual-stack run), and sharedLab says the lab belongs to another fleet (close leaves it).
	tag       string
	sharedLab bool
	// pool is the prefix the lab's own configuration exports (birdConfig) [10.0.0.0/8].
	pool  netip.Prefix
	mu    sync.Mutex
	procs []*exec.Cmd
	conns []*birdConn
	// notUp: since when each session end (node, peer) has been seen short of Established, both
	// ends running and neither held or started since (hold and startProc forget it); reopening:
	// the sessions (lower node index first) reopenStuck is opening again.
	notUp     map[gateKey]time.Time
	reopening map[[2]int]bool
	peerIDs   []map[string]int // by node: its peers' indexes by protoID
	reopens   atomic.Int32     // sessions reopenStuck opened again
}

// gateKey is node's session end toward peer.
type gateKey struct {
	node int
	peer netip.Addr
}

// birdStuckAfter is how long a session of two running BIRDs may stay short of Established before
// the lab opens it again from one end (reopenStuck). A session opened by one end is up in 3 to 5 s.
const birdStuckAfter = 20 * time.Second

// FindBIRD returns the path of the bird binary (path, else $BIRD, else bird from PATH), or an
// error that says how to install it.
func FindBIRD(path string) (string, error) {
	if path == "" {
		path = os.Getenv("BIRD")
	}
	if path == "" {
		path = "bird"
	}
	p, err := exec.LookPath(path)
	if err != nil {
		return "", fmt.Errorf("bird not found (%v): run `make tools` (it installs Debian's package bird, BIRD 1.6, as root: apt-get install -y bird)", err)
	}
	return p, nil
}

func newBIRDFleet(nodes []speakerNode, opts Options) (fleet, error) {
	bin, err := FindBIRD(opts.BIRD)
	if err != nil {
		return nil, err
	}
	// Control socket paths must stay under 108 bytes: a short directory under /tmp.
	dir, err := os.MkdirTemp("/tmp", "rrv")
	if err != nil {
		return nil, err
	}
	return &birdFleet{nodes: nodes, opts: opts, bin: bin, dir: dir, procs: make([]*exec.Cmd, len(nodes)), conns: make([]*birdConn, len(nodes))}, nil
}

func (f *birdFleet) socket(i int) string { return f.file(i, "ctl") }

// file is node i's file of this fleet with extension ext.
func (f *birdFleet) file(i int, ext string) string {
	if f.tag != "" {
		return filepath.Join(f.dir, fmt.Sprintf("n%d-%s.%s", i, f.tag, ext)) // n2-6 is not n26
	}
	return filepath.Join(f.dir, fmt.Sprintf("n%d.%s", i, ext))
}

// Config is BIRD's configuration for node nd, written as Calico's bird.cfg.template writes it for
// a node with node-specific BGP peers (the Node_ protocols): the template's BGP settings, `rr
// client` and `rr cluster id` toward peers with no or another cluster ID when the node is a route
// reflector, `passive on` toward mesh peers with a higher address, and an export filter that
// passes the pod blocks (Calico's calico_export_to_bgp_peers passes its IP pools). Calico's kernel
// and direct protocols are left out: nothing is programmed into the kernel and no interface route
// is counted. TestBIRDConfigMatchesConfd holds it to what Calico's confd renders.
//
// The same configuration with IPv6 addresses and blocks (and pool, the IPv6 pod pool) is bird6's,
// as bird6.cfg.template writes it: the router ID stays a 4-octet ID (nd.routerID).
func birdConfig(nd speakerNode, asn uint32, port int, pool netip.Prefix) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Node %s\nrouter id %s;\nlisten bgp address %s port %d;\n\n", nd.name, nd.routerIDOrAddr(), nd.addr, port)
	b.WriteString("protocol device {\n  scan time 2;\n}\n\n")
	fmt.Fprintf(&b, "protocol static {\n  route %s blackhole;\n}\n\n", nd.block)
	fmt.Fprintf(&b, "function calico_export_to_bgp_peers() {\n  if ( net ~ %s ) then { accept; }\n  reject;\n}\n\n", pool)
	fmt.Fprintf(&b, `template bgp bgp_template {
  description "Connection to BGP peer";
  local as %d;
  gateway recursive;
  add paths on;
  graceful restart;
  connect delay time 2;
  connect retry time 5;
  error wait time 5,30;
}
`, asn)
	if nd.clusterID != "" {
		fmt.Fprintf(&b, "\n# This node is configured as a route reflector with cluster ID %s;\n# ignore node-to-node mesh setting.\n", nd.clusterID)
	}
	b.WriteString("\n# ------------- Node-specific peers -------------\n")
	for _, p := range nd.peers {
		id := protoID(p.addr)
		fmt.Fprintf(&b, "protocol bgp Node_%s from bgp_template {\n  ttl security off;\n  multihop;\n", id)
		portPart := ""
		if port != 179 {
			portPart = fmt.Sprintf("port %d ", port)
		}
		fmt.Fprintf(&b, "  neighbor %s %sas %d;\n  source address %s;  # The local address we use for the TCP connection\n", p.addr, portPart, asn, nd.addr)
		b.WriteString("  import filter {\n    accept;\n  };\n  export filter {\n    calico_export_to_bgp_peers();\n    reject;\n  };\n")
		if p.passive {
			b.WriteString("  passive on; # Mesh is unidirectional, peer will connect to us.\n")
		}
		if p.rrClient {
			fmt.Fprintf(&b, "  rr client;\n  rr cluster id %s;\n", nd.clusterID)
		}
		b.WriteString("}\n")
	}
	return b.String()
}

func (f *birdFleet) start(ctx context.Context) error {
	for i := range f.nodes {
		if f.nodes[i].absent {
			continue
		}
		if err := f.startProc(i); err != nil {
			return err
		}
	}
	// Connect to every control socket.
	for i := range f.nodes {
		if f.nodes[i].absent {
			continue
		}
		if err := f.dial(ctx, i); err != nil {
			return err
		}
	}
	// A BIRD that started before its peers tried them while they did not listen yet and backs
	// off (confd's template, and birdConfig's: error wait 5 to 30 s, connect retry 5 s), and two
	// ends that connect at about the same time can drop each other's session over and over (see
	// restartNodes): a fresh lab of 30 took 16 to 42 s to converge when every BIRD restarted its
	// protocols at once. Every BIRD listens now: each session is opened again by one end.
	return f.openOnce(ctx)
}

// openOnce has every session of the running BIRDs opened by one end: every BGP protocol is
// held down, then let up as openInOrder says, the end first in the fleet opening.
func (f *birdFleet) openOnce(ctx context.Context) error {
	var o openOrder
	for i, nd := range f.nodes {
		if nd.absent {
			continue
		}
		for _, p := range nd.peers {
			o.add(f, i, p.idx, p.addr)
		}
	}
	return o.open(ctx)
}

// restart starts node i's BIRD again after stop (a failure drill's node coming back).
func (f *birdFleet) restart(ctx context.Context, i int) error {
	if f.nodes[i].absent {
		return nil
	}
	if err := f.startProc(i); err != nil {
		return err
	}
	return f.dial(ctx, i)
}

// startProc starts node i's BIRD.
func (f *birdFleet) startProc(i int) error {
	nd := f.nodes[i]
	var cfg string
	if f.configs != nil {
		cfg = f.configs[i]
	} else {
		cfg = f.file(i, "conf")
		pool := f.pool
		if !pool.IsValid() {
			pool = podPool
		}
		if err := os.WriteFile(cfg, []byte(birdConfig(nd, f.opts.ASN, f.opts.Port, pool)), 0o644); err != nil {
			return err
		}
	}
	logFile, err := os.Create(f.file(i, "log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	args := []string{"-f", "-c", cfg, "-s", f.socket(i), "-P", f.file(i, "pid")}
	var cmd *exec.Cmd
	if f.lab != nil {
		// `ip netns exec` enters the namespace and execs bird: the process is bird itself.
		cmd = f.lab.command(i, f.bin, args...)
	} else {
		cmd = exec.Command(f.bin, args...)
	}
	cmd.Dir = filepath.Dir(cfg) // confd's bird.cfg includes bird_aggr.cfg and bird_ipam.cfg by relative path
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s %s: %v", filepath.Base(f.bin), nd.name, err)
	}
	f.mu.Lock()
	f.procs[i] = cmd
	f.forget(i, netip.Addr{})
	f.mu.Unlock()
	return nil
}

// forget drops node i's session ends toward peer (every peer when peer is the zero address) from
// notUp, and their other ends: their wait starts again. f.mu is held.
func (f *birdFleet) forget(i int, peer netip.Addr) {
	for k := range f.notUp {
		if (k.node == i && (!peer.IsValid() || k.peer == peer)) ||
			(k.peer == f.nodes[i].addr && (!peer.IsValid() || f.nodes[k.node].addr == peer)) {
			delete(f.notUp, k)
		}
	}
}

// dial connects to node i's control socket, waiting up to 20 s for BIRD to open it.
func (f *birdFleet) dial(ctx context.Context, i int) error {
	var c *birdConn
	var err error
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err = dialBIRD(f.socket(i))
		if err == nil || time.Now().After(deadline) {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		log, _ := os.ReadFile(f.file(i, "log"))
		return fmt.Errorf("%s %s did not start: %v: %s", filepath.Base(f.bin), f.nodes[i].name, err, strings.TrimSpace(string(log)))
	}
	f.mu.Lock()
	f.conns[i] = c
	f.mu.Unlock()
	return nil
}

var routeCount = regexp.MustCompile(`(\d+) of (\d+) routes for (\d+) networks`)

func (f *birdFleet) poll(ctx context.Context, i int) (nodeState, error) {
	var st nodeState
	f.mu.Lock()
	c, cmd := f.conns[i], f.procs[i]
	f.mu.Unlock()
	if c == nil || cmd == nil {
		return st, errStopped
	}
	out, err := f.command(i, c, "show route"+f.filter+" count")
	if err != nil {
		return st, err
	}
	m := routeCount.FindStringSubmatch(out)
	if m == nil {
		return st, fmt.Errorf("unexpected reply to show route count: %q", out)
	}
	st.routes, _ = strconv.Atoi(m[1]) // "<shown> of <in the table> routes": the filter's count
	out, err = f.command(i, c, "show route"+f.filter+" primary")
	if err != nil {
		return st, err
	}
	for _, line := range strings.Split(out, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if p, err := netip.ParsePrefix(fields[0]); err == nil {
			st.blocks = append(st.blocks, p)
		}
	}
	out, err = f.command(i, c, "show protocols")
	if err != nil {
		return st, err
	}
	now := time.Now()
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, " BGP ") {
			continue
		}
		up := strings.Contains(line, "Established")
		if up {
			st.established++
		}
		f.watch(i, strings.Fields(line)[0], up, now)
	}
	st.memoryKiB = rssKiB(cmd.Process.Pid)
	return st, nil
}

// watch notes whether node i's BGP protocol name (Node_<peer's address>, as hold names them) is
// up, and has its session opened again (reopenStuck) once it has stayed down for birdStuckAfter
// with both ends running.
func (f *birdFleet) watch(i int, name string, up bool, now time.Time) {
	_, id, ok := strings.Cut(name, "_")
	if !ok {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.peerIDs == nil {
		f.peerIDs = make([]map[string]int, len(f.nodes))
	}
	if f.peerIDs[i] == nil {
		f.peerIDs[i] = map[string]int{}
		for _, p := range f.nodes[i].peers {
			f.peerIDs[i][protoID(p.addr)] = p.idx
		}
	}
	j, ok := f.peerIDs[i][id]
	if !ok {
		return
	}
	k := gateKey{i, f.nodes[j].addr}
	if up || f.conns[j] == nil || f.conns[i] == nil {
		delete(f.notUp, k)
		return
	}
	if f.notUp == nil {
		f.notUp, f.reopening = map[gateKey]time.Time{}, map[[2]int]bool{}
	}
	since, seen := f.notUp[k]
	if !seen {
		f.notUp[k] = now
		return
	}
	pair := [2]int{min(i, j), max(i, j)}
	if now.Sub(since) < birdStuckAfter || f.reopening[pair] {
		return
	}
	f.reopening[pair] = true
	go f.reopenStuck(pair[0], pair[1], now.Sub(since))
}

// reopenStuck opens the session of nodes a < b again from one end (a's, as openOnce would): both
// ends held down, then let up in order (openInOrder). Under load the fresh start's or a drill's
// ordered opening can miss: two ends whose connections cross drop each other's session over and
// over with graceful restart (openInOrder), and a 100-node lab on a machine loaded 70 to 140 once
// had 4 of 309 sessions down 4 minutes after its start.
func (f *birdFleet) reopenStuck(a, b int, down time.Duration) {
	defer func() {
		f.mu.Lock()
		delete(f.reopening, [2]int{a, b})
		f.mu.Unlock()
	}()
	f.reopens.Add(1)
	logf(f.opts, "%s %s: session with %s not established for %v: opening it again from one end",
		filepath.Base(f.bin), f.nodes[a].name, f.nodes[b].name, down.Round(time.Second))
	ea, eb := gateEntry{f, a, f.nodes[b].addr}, gateEntry{f, b, f.nodes[a].addr}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := holdAll([]gateEntry{ea, eb}, true); err != nil {
		return // an end stopped meanwhile: a drill's or the run's end
	}
	_ = openInOrder(ctx, []gateEntry{ea}, []gateEntry{eb})
}

// protoID is the part of confd's protocol names (and birdConfig's) after the kind: the peer's
// address with '.' and ':' as '_'.
func protoID(a netip.Addr) string { return protoIDs.Replace(a.String()) }

var protoIDs = strings.NewReplacer(".", "_", ":", "_")

// rssKiB returns a process's resident memory.
func rssKiB(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				n, _ := strconv.Atoi(f[0])
				return n
			}
		}
	}
	return 0
}

// stop shuts one BIRD down: SIGTERM (it closes its sessions with a Cease, so peers withdraw its
// routes instead of keeping them for a graceful restart), then SIGKILL after birdStopGrace.
func (f *birdFleet) stop(i int) error {
	f.mu.Lock()
	cmd, c := f.procs[i], f.conns[i]
	f.procs[i], f.conns[i] = nil, nil
	f.mu.Unlock()
	if c != nil {
		c.close()
	}
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
		if d := time.Since(start); d > 5*time.Second {
			logf(f.opts, "%s %s took %v to exit after SIGTERM", filepath.Base(f.bin), f.nodes[i].name, d.Round(100*time.Millisecond))
		}
	case <-time.After(birdStopGrace):
		logf(f.opts, "%s %s did not exit %v after SIGTERM: killed (its peers keep its routes as stale)", filepath.Base(f.bin), f.nodes[i].name, birdStopGrace)
		_ = cmd.Process.Kill()
		<-done
	}
	return nil
}

// birdStopGrace is how long stop waits for a BIRD to exit after SIGTERM (5 s before): BIRDs of a
// 100-node lab took up to 13 s on a machine loaded 50 to 140, and a BIRD killed before its Cease
// went out leaves its routes stale at its peers (graceful restart).
const birdStopGrace = 30 * time.Second

// hold disables (down) or enables node i's BGP protocols toward peer: those confd's templates and
// birdConfig name <kind>_<peer's address, '.' and ':' as '_'>.
func (f *birdFleet) hold(i int, peer netip.Addr, down bool) error {
	f.mu.Lock()
	c := f.conns[i]
	f.mu.Unlock()
	if c == nil {
		return errStopped
	}
	cmd := "enable"
	if down {
		cmd = "disable"
	}
	f.mu.Lock()
	f.forget(i, peer)
	f.mu.Unlock()
	_, err := f.command(i, c, fmt.Sprintf("%s \"*_%s\"", cmd, protoID(peer)))
	if err != nil && strings.Contains(err.Error(), "No protocols match") {
		return nil // (no session toward peer here to hold)
	}
	return err
}

// command runs line on node i's control connection c; when the connection itself fails, it
// connects again once (redial) and runs line there.
func (f *birdFleet) command(i int, c *birdConn, line string) (string, error) {
	out, err := c.command(line)
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		c2, err2 := f.redial(i, c, err)
		if err2 != nil {
			return "", err2
		}
		if c2 != nil {
			return c2.command(line)
		}
	}
	return out, err
}

// redial replaces node i's control connection old, which failed with cause, by a new one, unless
// another caller did already (that one is returned) or the node was stopped (nil). A drill's
// restarted route reflector once reset the connection its 97 holds went through (a 100-node lab
// on a loaded machine); whether BIRD still ran is what the error says when connecting fails.
func (f *birdFleet) redial(i int, old *birdConn, cause error) (*birdConn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.conns[i]; c != old {
		return c, nil
	}
	c, err := dialBIRD(f.socket(i))
	if err != nil {
		log, _ := os.ReadFile(f.file(i, "log"))
		return nil, fmt.Errorf("%s %s: control connection failed (%v), connecting again: %v (its output: %q)", filepath.Base(f.bin), f.nodes[i].name, cause, err, strings.TrimSpace(string(log)))
	}
	old.close()
	f.conns[i] = c
	logf(f.opts, "%s %s: control connection failed (%v): connected again", filepath.Base(f.bin), f.nodes[i].name, cause)
	return c, nil
}

func (f *birdFleet) close() {
	stopAll(len(f.nodes), f.stop)
	if f.lab != nil && !f.sharedLab {
		f.lab.close()
	}
	if os.Getenv("RRV_KEEP_BIRD_DIR") == "" {
		os.RemoveAll(f.dir)
	}
}

// birdConn speaks BIRD's control socket protocol: a command per line; reply lines start with a
// four-digit code and '-' (more follows) or ' ' (last line), or with a space (continuation).
// A command and its reply hold mu: the lab's confd loop and a test's checks share a connection.
type birdConn struct {
	mu   sync.Mutex
	conn net.Conn
	r    *bufio.Reader
}

func dialBIRD(path string) (*birdConn, error) {
	conn, err := net.DialTimeout("unix", path, 2*time.Second)
	if err != nil {
		return nil, err
	}
	c := &birdConn{conn: conn, r: bufio.NewReaderSize(conn, 1<<16)}
	if _, err := c.reply(); err != nil { // the greeting: 0001 BIRD 1.6.x ready.
		conn.Close()
		return nil, err
	}
	return c, nil
}

func (c *birdConn) command(cmd string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.conn.Write([]byte(cmd + "\n")); err != nil {
		return "", err
	}
	return c.reply()
}

func (c *birdConn) reply() (string, error) {
	var b strings.Builder
	for {
		line, err := c.r.ReadString('\n')
		if err != nil {
			return b.String(), err
		}
		line = strings.TrimRight(line, "\n")
		if len(line) >= 5 && isDigits(line[:4]) {
			code := line[:4]
			b.WriteString(line[5:])
			b.WriteByte('\n')
			if line[4] == ' ' {
				if code[0] == '8' || code[0] == '9' {
					return b.String(), errors.New("bird: " + strings.TrimSpace(line[5:]))
				}
				return b.String(), nil
			}
			continue
		}
		if len(line) == 4 && isDigits(line) {
			return b.String(), nil
		}
		b.WriteString(strings.TrimPrefix(line, " "))
		b.WriteByte('\n')
	}
}

func (c *birdConn) close() { c.conn.Close() }

func isDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}
