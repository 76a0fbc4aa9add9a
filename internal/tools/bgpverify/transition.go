package bgpverify

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Follow keeps the Lab in sync the way calico-node keeps its node: one confd per node runs as
// calico-node runs it, watching the API server and rendering the node's files on every change, and
// every pause the Lab has each BIRD whose bird.cfg changed since it last loaded one load it
// (`configure`, what confd's reload command does in calico-node), and starts the BIRDs that are
// not running but not killed (Revive). It runs until ctx ends or stop is called; stop ends the
// confd processes and returns the last round's error. The Lab must have been synced once.
func (l *Lab) Follow(ctx context.Context, pause time.Duration) (stop func() error, err error) {
	l.mu.Lock()
	dirs := l.dirs
	l.mu.Unlock()
	if dirs == nil {
		return nil, errors.New("lab: Follow before the first Sync")
	}
	confd, err := l.shareWithConfdUsers(dirs)
	if err != nil {
		return nil, fmt.Errorf("lab: sharing confd with its users: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	exited := make([]atomic.Bool, len(l.names))
	var confds sync.WaitGroup
	fail := func(err error) (func() error, error) {
		cancel()
		confds.Wait()
		return nil, err
	}
	for i, name := range l.names {
		cmd := confdCommand(ctx, confd, dirs[i], name, l.env)
		if err := l.confdUser(cmd, i, dirs[i]); err != nil {
			return fail(err)
		}
		logf, err := os.Create(filepath.Join(dirs[i], "confd-watch.log"))
		if err != nil {
			return fail(err)
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		err = cmd.Start()
		logf.Close()
		if err != nil {
			return fail(fmt.Errorf("confd for node %s: %v", name, err))
		}
		confds.Add(1)
		go func() {
			defer confds.Done()
			_ = cmd.Wait()
			exited[i].Store(true)
		}()
	}
	done := make(chan struct{})
	var mu sync.Mutex
	var last error
	l.followMu = &mu
	l.followErr = func() error { mu.Lock(); defer mu.Unlock(); return last }
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			start := time.Now()
			l.mu.Lock()
			err := l.apply(ctx)
			l.mu.Unlock()
			took := time.Since(start)
			for i := range exited {
				if exited[i].Load() && ctx.Err() == nil {
					err = errors.Join(err, fmt.Errorf("confd for node %s exited: %s", l.names[i], lastLines(readFile(filepath.Join(dirs[i], "confd-watch.log")), 3)))
				}
			}
			mu.Lock()
			if ctx.Err() == nil {
				last = err
			}
			l.rounds++
			if took > l.roundMax {
				l.roundMax, l.roundMaxErr = took, err
			}
			l.roundTotal += took
			mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(pause):
			}
		}
	}()
	return func() error {
		cancel()
		<-done
		confds.Wait()
		mu.Lock()
		defer mu.Unlock()
		return last
	}, nil
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// FollowErr is the last error of the Follow loop (nil before its first round).
func (l *Lab) FollowErr() error {
	if l.followErr == nil {
		return nil
	}
	return l.followErr()
}

// FollowRounds reports the Follow loop's rounds so far, the mean and the longest with its error
// (a round reads every node's bird.cfg, gives the configures and starts revived BIRDs).
func (l *Lab) FollowRounds() (rounds int, mean, longest time.Duration, longestErr error) {
	if l.followMu == nil {
		return 0, 0, 0, nil
	}
	l.followMu.Lock()
	defer l.followMu.Unlock()
	if l.rounds == 0 {
		return 0, 0, 0, nil
	}
	return l.rounds, l.roundTotal / time.Duration(l.rounds), l.roundMax, l.roundMaxErr
}

// Reconfigure is one `configure` the Lab gave a running BIRD: the BGP protocols of its bird.cfg
// that appeared, went, or whose configuration changed (BIRD restarts those).
type Reconfigure struct {
	At                      time.Time
	Node                    string
	Added, Removed, Changed []string // protocol names
}

// protocolBlocks returns every `protocol bgp` block of a bird.cfg by name, its text as written.
func protocolBlocks(cfg []byte) map[string]string {
	out := map[string]string{}
	lines := strings.Split(string(cfg), "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, "protocol bgp ") {
			continue
		}
		name := strings.Fields(l)[2]
		var body []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "}"; i++ {
			body = append(body, lines[i])
		}
		out[name] = l + "\n" + strings.Join(body, "\n")
	}
	return out
}

func diffProtocols(node string, before, after []byte) Reconfigure {
	r := Reconfigure{At: time.Now(), Node: node}
	b, a := protocolBlocks(before), protocolBlocks(after)
	for name, text := range a {
		old, ok := b[name]
		switch {
		case !ok:
			r.Added = append(r.Added, name)
		case old != text:
			r.Changed = append(r.Changed, name)
		}
	}
	for name := range b {
		if _, ok := a[name]; !ok {
			r.Removed = append(r.Removed, name)
		}
	}
	slices.Sort(r.Added)
	slices.Sort(r.Removed)
	slices.Sort(r.Changed)
	return r
}

// SessionRestart is a BGP session seen Established on a node that left Established while both
// BIRDs ran: BIRD restarted it (a changed configuration, a Cease from the peer, a reset).
type SessionRestart struct {
	Node, Peer string
	At         time.Duration // since the window began
	Reason     string        // BIRD's last error of the protocol (`show protocols all`), if any
}

// lastError is the "Last error" BIRD reports for protocol name, "" if none.
func lastError(c *birdConn, name string) string {
	if c == nil {
		return ""
	}
	out, err := c.command("show protocols all " + name)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Last error:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// TransitionFigures are what a Sampler measured over one event window on the Lab.
type TransitionFigures struct {
	Event    string
	Began    time.Time
	Duration time.Duration
	Samples  int // sampling rounds (every running BIRD read once per round)
	// MissingPairSamples counts, over the rounds, the pairs (node, other node's block) that were
	// routed before and missing in that round, with both BIRDs running.
	MissingPairSamples int
	// MissingByPair is the missing samples of each such pair ("node->origin").
	MissingByPair map[string]int
	// LongestGap is the longest time one pair was missing (from the first round that missed it to
	// the first that had it again, or to the window's end), and that pair.
	LongestGap     time.Duration
	LongestGapPair string
	// Restarts are the sessions that went down while both BIRDs ran, seen from each end, and that
	// one end's configuration still has at the window's end (it went down and back, or is down).
	Restarts []SessionRestart
	// Removed are the sessions that went down while both BIRDs ran and that neither end's
	// configuration has at the window's end: the change removed them. One end's protocol is seen
	// down (the peer's configure removed its side first, with a Cease) before that end's own
	// configure removes it; that is no restart.
	Removed []SessionRestart
	// DownToDeadPeers counts sessions that went down because the peer's BIRD was not running.
	DownToDeadPeers int
	// SinceChanges counts protocols that stayed Established but whose `show protocols` since
	// time moved between two samples (a re-feed; not counted as a restart).
	SinceChanges int
	// Reopened counts the sessions the lab opened again from one end in the window, after they
	// stayed short of Established for birdStuckAfter with both BIRDs running (birdFleet.watch,
	// fed by the sampler's reads): BIRD 1.6's crossing connections, not the product's doing.
	Reopened int
	// Reconfigured are the configures the Lab gave BIRDs in the window, with the protocols each
	// changed (BIRD restarts a changed protocol).
	Reconfigured []Reconfigure
	// SteadyRoutes is the busiest node's route count (paths to pod blocks) in the window's first
	// round; PeakRoutes the highest count of any node in any round, on PeakNode.
	SteadyRoutes int
	PeakRoutes   int
	PeakNode     string
	// GapStarts are the gaps that began in the window (a pair routed before and missing in a
	// round), in order, with the node's BGP sessions not Established in that round: what a lost
	// pair's node saw when it lost it.
	GapStarts []PairGap
}

// PairGap is the start of a pair's gap: At after the window began, the node's BGP sessions not
// Established in that round (by peer node, or protocol name when the peer is unknown).
type PairGap struct {
	Pair           string
	At             time.Duration
	NotEstablished []string
}

// RestartsByNode counts the restarted sessions per node.
func (f *TransitionFigures) RestartsByNode() map[string]int {
	out := map[string]int{}
	for _, r := range f.Restarts {
		out[r.Node]++
	}
	return out
}

// RestartedSessions is the restarts as node->peer strings, sorted.
func (f *TransitionFigures) RestartedSessions() []string { return sessionStrings(f.Restarts) }

// RemovedSessions is the removed sessions seen going down as node->peer strings, sorted.
func (f *TransitionFigures) RemovedSessions() []string { return sessionStrings(f.Removed) }

func sessionStrings(list []SessionRestart) []string {
	var out []string
	for _, r := range list {
		s := fmt.Sprintf("%s->%s@%.1fs", r.Node, r.Peer, r.At.Seconds())
		if r.Reason != "" {
			s += "(" + r.Reason + ")"
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// MissingWhere sums the missing pair-samples of the pairs keep accepts (keep(node, origin)).
func (f *TransitionFigures) MissingWhere(keep func(node, origin string) bool) (samples int, pairs []string) {
	for p, n := range f.MissingByPair {
		a, b, _ := strings.Cut(p, "->")
		if keep(a, b) {
			samples += n
			pairs = append(pairs, fmt.Sprintf("%s(%d)", p, n))
		}
	}
	slices.Sort(pairs)
	return samples, pairs
}

func (f *TransitionFigures) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %v, %d samples: %d missing pair-samples (%d pairs)", f.Event, f.Duration.Round(10*time.Millisecond), f.Samples, f.MissingPairSamples, len(f.MissingByPair))
	if f.MissingPairSamples > 0 {
		fmt.Fprintf(&b, ", longest gap %v (%s)", f.LongestGap.Round(10*time.Millisecond), f.LongestGapPair)
	} else {
		b.WriteString(", longest gap 0s")
	}
	byNode := f.RestartsByNode()
	names := make([]string, 0, len(byNode))
	for n := range byNode {
		names = append(names, n)
	}
	slices.Sort(names)
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s:%d", n, byNode[n]))
	}
	fmt.Fprintf(&b, "; %d sessions restarted [%s], %d removed, %d down to dead peers, %d since-changes while Established, %d stuck ones the lab reopened", len(f.Restarts), strings.Join(parts, " "), len(f.Removed), f.DownToDeadPeers, f.SinceChanges, f.Reopened)
	var changed []string
	for _, r := range f.Reconfigured {
		if len(r.Changed) > 0 {
			changed = append(changed, fmt.Sprintf("%s:%d", r.Node, len(r.Changed)))
		}
	}
	fmt.Fprintf(&b, "; %d configures, changed protocols [%s]", len(f.Reconfigured), strings.Join(changed, " "))
	fmt.Fprintf(&b, "; busiest node's routes %d at start, peak %d (%s)", f.SteadyRoutes, f.PeakRoutes, f.PeakNode)
	return b.String()
}

// Sampler reads every running BIRD of a Lab every interval: the pod blocks it routes, its route
// count, and its BGP protocols' states, and measures each event window (Begin .. End).
type Sampler struct {
	l        *Lab
	interval time.Duration
	byAddr   map[netip.Addr]int

	mu    sync.Mutex
	win   *TransitionFigures
	began time.Time
	// reopens is the lab's count of reopened sessions (Lab.Reopens) when the window began.
	reopens int
	// State kept across windows.
	proc    []*exec.Cmd                // the BIRD process last read per node (a new one resets)
	seen    map[[2]int]bool            // pairs routed at least once by the observer's current BIRD
	since   map[[2]int]time.Time       // pairs missing now: when first missed
	protos  []map[string]protocolState // per node, per BGP protocol
	pollErr error

	cancel context.CancelFunc
	done   chan struct{}
}

type protocolState struct {
	up    bool
	since string
}

// StartSampler starts sampling every interval until Stop.
func (l *Lab) StartSampler(ctx context.Context, interval time.Duration) *Sampler {
	s := &Sampler{l: l, interval: interval, byAddr: map[netip.Addr]int{}, proc: make([]*exec.Cmd, len(l.names)),
		seen: map[[2]int]bool{}, since: map[[2]int]time.Time{}, protos: make([]map[string]protocolState, len(l.names)), done: make(chan struct{})}
	for i := range l.names {
		s.byAddr[NodeAddress(i).Addr()] = i
	}
	ctx, s.cancel = context.WithCancel(ctx)
	go func() {
		defer close(s.done)
		next := time.Now()
		for ctx.Err() == nil {
			s.round(ctx)
			next = next.Add(interval)
			if d := time.Until(next); d > 0 {
				select {
				case <-ctx.Done():
				case <-time.After(d):
				}
			} else {
				next = time.Now() // a round longer than the interval: go on at once
			}
		}
	}()
	return s
}

// Stop ends sampling.
func (s *Sampler) Stop() {
	s.cancel()
	<-s.done
}

// Err is the last sampling error (a BIRD that did not answer while it ran), nil if none.
func (s *Sampler) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pollErr
}

// Begin starts the window of event (ending any window under way).
func (s *Sampler) Begin(event string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.began, s.reopens = time.Now(), s.l.Reopens()
	s.win = &TransitionFigures{Event: event, MissingByPair: map[string]int{}, SteadyRoutes: -1}
	// Pairs missing when the window begins count from its start.
	for p := range s.since {
		s.since[p] = s.began
	}
}

// End ends the window under way and returns its figures. A session seen going down counts as
// removed, not restarted, when neither end's configuration (as its BIRD last loaded it) has it
// any more.
func (s *Sampler) End() TransitionFigures {
	cfgs := s.l.loadedConfigs()
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.win
	if f == nil {
		return TransitionFigures{}
	}
	f.Restarts, f.Removed = splitRemoved(f.Restarts, s.l.names, cfgs, s.peerOf)
	now := time.Now()
	f.Began, f.Duration, f.Reopened = s.began, now.Sub(s.began), s.l.Reopens()-s.reopens
	for p, t := range s.since {
		if g := now.Sub(t); g > f.LongestGap {
			f.LongestGap, f.LongestGapPair = g, s.l.names[p[0]]+"->"+s.l.names[p[1]]
		}
	}
	for _, r := range s.l.Reconfigures() {
		if !r.At.Before(s.began) {
			f.Reconfigured = append(f.Reconfigured, r)
		}
	}
	if f.SteadyRoutes < 0 {
		f.SteadyRoutes = 0
	}
	s.win = nil
	return *f
}

type nodeSample struct {
	at     time.Time
	ok     bool
	cmd    *exec.Cmd
	blocks []netip.Prefix
	routes int
	protos map[string]protocolState
}

// round reads every running BIRD once, then accounts the round.
func (s *Sampler) round(ctx context.Context) {
	l := s.l
	n := len(l.names)
	samples := make([]nodeSample, n)
	conns := make([]*birdConn, n)
	var errs []string
	for i := range n {
		l.f.mu.Lock()
		c, cmd := l.f.conns[i], l.f.procs[i]
		l.f.mu.Unlock()
		if c == nil || cmd == nil || ctx.Err() != nil {
			continue
		}
		ns, err := readNode(c, l.f.filter)
		l.f.mu.Lock()
		still := l.f.procs[i] == cmd
		l.f.mu.Unlock()
		if err != nil {
			if still {
				errs = append(errs, fmt.Sprintf("bird %s: %v", l.names[i], err))
			}
			continue
		}
		ns.at, ns.ok, ns.cmd = time.Now(), true, cmd
		samples[i], conns[i] = ns, c
		for _, name := range slices.Sorted(maps.Keys(ns.protos)) {
			l.f.watch(i, name, ns.protos[name].up, ns.at) // a stuck session is opened again, as in the lab's other reads
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(errs) > 0 {
		s.pollErr = fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	if ctx.Err() != nil {
		return
	}
	w := s.win
	if w != nil {
		w.Samples++
	}
	busiest := 0
	for i, ns := range samples {
		if !ns.ok {
			continue
		}
		if s.proc[i] != ns.cmd { // a BIRD (re)started: nothing of the last one carries over
			s.proc[i] = ns.cmd
			s.protos[i] = nil
			for p := range s.seen {
				if p[0] == i {
					delete(s.seen, p)
					delete(s.since, p)
				}
			}
		}
		if ns.routes > busiest {
			busiest = ns.routes
		}
		if w != nil && ns.routes > w.PeakRoutes {
			w.PeakRoutes, w.PeakNode = ns.routes, l.names[i]
		}
		for j := range n {
			if j == i {
				continue
			}
			p := [2]int{i, j}
			if !samples[j].ok && !l.Running(l.names[j]) {
				// The origin's BIRD is dead: its block does not count (nor a gap under way).
				delete(s.since, p)
				delete(s.seen, p)
				continue
			}
			has := slices.Contains(ns.blocks, Block(j))
			switch {
			case has:
				s.seen[p] = true
				if t, ok := s.since[p]; ok {
					delete(s.since, p)
					if g := ns.at.Sub(t); w != nil && g > w.LongestGap {
						w.LongestGap, w.LongestGapPair = g, l.names[i]+"->"+l.names[j]
					}
				}
			case s.seen[p]:
				if _, ok := s.since[p]; !ok {
					s.since[p] = ns.at
					if w != nil {
						w.GapStarts = append(w.GapStarts, PairGap{Pair: l.names[i] + "->" + l.names[j], At: ns.at.Sub(s.began), NotEstablished: s.notEstablished(ns)})
					}
				}
				if w != nil {
					w.MissingPairSamples++
					w.MissingByPair[l.names[i]+"->"+l.names[j]]++
				}
			}
		}
		// Sessions.
		old := s.protos[i]
		for name, st := range ns.protos {
			prev, ok := old[name]
			if !ok || !prev.up || w == nil {
				continue
			}
			if st.up {
				// Still Established, but its since column moved: BIRD also stamps a protocol's
				// re-feed (state feed, e.g. on a peer's route refresh), so this is no restart
				// (a restart leaves Established for longer than a sampling interval: the peer
				// reconnects after a Cease).
				if st.since != prev.since {
					w.SinceChanges++
				}
				continue
			}
			peer := s.peerOf(name)
			if peer >= 0 && !l.Running(l.names[peer]) {
				w.DownToDeadPeers++
				continue
			}
			pn := name
			if peer >= 0 {
				pn = l.names[peer]
			}
			w.Restarts = append(w.Restarts, SessionRestart{Node: l.names[i], Peer: pn, At: ns.at.Sub(s.began), Reason: lastError(conns[i], name)})
		}
		s.protos[i] = ns.protos
	}
	if w != nil && w.SteadyRoutes < 0 {
		w.SteadyRoutes = busiest
	}
}

// splitRemoved parts the sessions seen going down into those one end's configuration (cfgs, by
// node index as names) still has at the end, restarts, and those neither end's has, removals.
// peerOf gives the node a protocol peers with (-1: unknown; such a session stays a restart).
func splitRemoved(downs []SessionRestart, names []string, cfgs [][]byte, peerOf func(protocol string) int) (restarts, removed []SessionRestart) {
	index := make(map[string]int, len(names))
	for i, n := range names {
		index[n] = i
	}
	peers := make([]map[int]bool, len(names)) // per node, read once: the nodes its configuration peers with
	has := func(i, j int) bool {
		if peers[i] == nil {
			peers[i] = map[int]bool{}
			if i < len(cfgs) {
				for name := range protocolBlocks(cfgs[i]) {
					if p := peerOf(name); p >= 0 {
						peers[i][p] = true
					}
				}
			}
		}
		return peers[i][j]
	}
	for _, r := range downs {
		i, ok := index[r.Node]
		j, ok2 := index[r.Peer]
		if ok && ok2 && !has(i, j) && !has(j, i) {
			removed = append(removed, r)
			continue
		}
		restarts = append(restarts, r)
	}
	return restarts, removed
}

// notEstablished names the BGP sessions of a sample that are not Established, by peer node
// (sorted).
func (s *Sampler) notEstablished(ns nodeSample) []string {
	var out []string
	for name, st := range ns.protos {
		if st.up {
			continue
		}
		if p := s.peerOf(name); p >= 0 {
			name = s.l.names[p]
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// peerOf is the node a protocol named Node_, Mesh_ or Global_<address> peers with, -1 if none.
func (s *Sampler) peerOf(protocol string) int {
	m := labPeerName.FindStringSubmatch(protocol)
	if m == nil {
		return -1
	}
	a, err := netip.ParseAddr(strings.ReplaceAll(m[2], "_", "."))
	if err != nil {
		return -1
	}
	if i, ok := s.byAddr[a]; ok {
		return i
	}
	return -1
}

// readNode reads one BIRD: the pod blocks it routes (primary routes), its count of routes to
// pod blocks (every path), and its BGP protocols' states.
func readNode(c *birdConn, filter string) (nodeSample, error) {
	var ns nodeSample
	out, err := c.command("show route" + filter + " count")
	if err != nil {
		return ns, err
	}
	m := routeCount.FindStringSubmatch(out)
	if m == nil {
		return ns, fmt.Errorf("unexpected reply to show route count: %q", out)
	}
	fmt.Sscan(m[1], &ns.routes)
	out, err = c.command("show route" + filter + " primary")
	if err != nil {
		return ns, err
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if p, err := netip.ParsePrefix(f[0]); err == nil {
			ns.blocks = append(ns.blocks, p)
		}
	}
	out, err = c.command("show protocols")
	if err != nil {
		return ns, err
	}
	ns.protos = map[string]protocolState{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		// name proto table state since info
		if len(f) < 5 || f[1] != "BGP" {
			continue
		}
		st := protocolState{since: f[4]}
		st.up = len(f) >= 6 && f[5] == "Established"
		ns.protos[f[0]] = st
	}
	return ns, nil
}
