package bgpverify

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// netLab is a set of network namespaces, one per node, each with an eth0 that is one end of a veth
// pair whose other end is a port of one bridge in a hub namespace of its own: the nodes share one
// Ethernet segment and nothing of it touches the host's namespace. Every node's eth0 carries its
// address, and a default route through eth0 makes addresses of other subnets reachable by ARP on
// the segment. Deleting the namespaces removes everything.
type netLab struct {
	ip    string
	id    string
	nodes int

	mu      sync.Mutex
	created []string // namespaces to delete
}

// ErrNoNetns is returned when network namespaces cannot be created here (not root, no iproute2, or
// a sandbox that forbids them).
var ErrNoNetns = errors.New("network namespaces cannot be created here")

// NetnsAvailable reports whether this machine can run the calico speaker: root, iproute2's ip, and
// a network namespace with a veth pair can be created and removed. The error wraps ErrNoNetns.
func NetnsAvailable() error {
	ip, err := exec.LookPath("ip")
	if err != nil {
		return fmt.Errorf("%w: iproute2's ip not found (%v)", ErrNoNetns, err)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: not running as root", ErrNoNetns)
	}
	lab, err := newNetLab(ip, 1)
	if err != nil {
		return err
	}
	defer lab.close()
	if err := lab.setup([]netip.Prefix{netip.MustParsePrefix("100.64.0.1/16")}, nil); err != nil {
		return fmt.Errorf("%w: %v", ErrNoNetns, err)
	}
	return nil
}

func newNetLab(ip string, nodes int) (*netLab, error) {
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	sweepStale(ip)
	return &netLab{ip: ip, id: fmt.Sprintf("%dx%s", os.Getpid(), hex.EncodeToString(b)), nodes: nodes}, nil
}

// Namespaces are named rrv<pid>x<random>-<node> (and -hub), after the process that made them.
func (l *netLab) hub() string       { return "rrv" + l.id + "-hub" }
func (l *netLab) ns(i int) string   { return fmt.Sprintf("rrv%s-%d", l.id, i) }
func (l *netLab) port(i int) string { return fmt.Sprintf("h%d", i) }

// sweepStale deletes the namespaces and /tmp/rrc folders of runs whose process is gone (killed
// before it could clean up: a test binary past its timeout).
func sweepStale(ip string) {
	dead := func(name, prefix, sep string) bool {
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok {
			return false
		}
		pid, err := strconv.Atoi(strings.SplitN(rest, sep, 2)[0])
		return err == nil && pid > 0 && syscall.Kill(pid, 0) == syscall.ESRCH
	}
	if ents, err := os.ReadDir("/run/netns"); err == nil {
		var del []string
		for _, e := range ents {
			if dead(e.Name(), "rrv", "x") {
				del = append(del, "netns del "+e.Name())
			}
		}
		if len(del) > 0 {
			_ = (&netLab{ip: ip}).batch("", del)
		}
	}
	if ents, err := os.ReadDir("/tmp"); err == nil {
		for _, e := range ents {
			if e.IsDir() && dead(e.Name(), "rrc", "-") {
				_ = os.RemoveAll(filepath.Join("/tmp", e.Name()))
			}
		}
	}
}

// batch runs ip commands, one per line, in namespace ns ("" for the current one).
func (l *netLab) batch(ns string, lines []string) error {
	args := []string{"-batch", "-"}
	if ns != "" {
		args = append([]string{"-n", ns}, args...)
	}
	cmd := exec.Command(l.ip, args...)
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// setup creates the hub with its bridge and one namespace per node with its addresses: addrs[i]
// and addrs6[i] (nil, or an invalid prefix: none of that family). IPv6 addresses skip duplicate
// address detection (nodad): BIRD6 binds them at once.
func (l *netLab) setup(addrs, addrs6 []netip.Prefix) error {
	names := []string{l.hub()}
	for i := range addrs {
		names = append(names, l.ns(i))
	}
	var add []string
	for _, n := range names {
		add = append(add, "netns add "+n)
	}
	err := l.batch("", add)
	// Record what exists even on a partial failure, so that close removes it.
	l.mu.Lock()
	for _, n := range names {
		if _, serr := os.Stat("/run/netns/" + n); serr == nil {
			l.created = append(l.created, n)
		}
	}
	l.mu.Unlock()
	if err != nil {
		return err
	}
	hub := []string{"link add br0 type bridge", "link set br0 up"}
	for i := range addrs {
		hub = append(hub,
			fmt.Sprintf("link add %s type veth peer name eth0 address %s netns %s", l.port(i), nodeMAC(i), l.ns(i)),
			fmt.Sprintf("link set %s master br0 up", l.port(i)))
	}
	if err := l.batch(l.hub(), hub); err != nil {
		return err
	}
	errs := make([]error, len(addrs))
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for i, a := range addrs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			cmds := []string{"link set lo up"}
			if a.IsValid() {
				cmds = append(cmds, fmt.Sprintf("addr add %s dev eth0", a))
			}
			if i < len(addrs6) && addrs6[i].IsValid() {
				cmds = append(cmds, fmt.Sprintf("addr add %s dev eth0 nodad", addrs6[i]))
			}
			cmds = append(cmds, "link set eth0 up")
			if a.IsValid() {
				cmds = append(cmds, "route add default dev eth0")
			}
			errs[i] = l.batch(l.ns(i), append(cmds, staticNeighbors(i, addrs, addrs6)...))
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// nodeMAC is the (locally administered) MAC address of node i's eth0.
func nodeMAC(i int) string {
	return fmt.Sprintf("02:72:72:%02x:%02x:%02x", byte(i>>16), byte(i>>8), byte(i))
}

// staticNeighbors are node i's neighbor entries for every other node, permanent: the kernel's
// neighbor tables are shared by every namespace (gc_thresh3, 1,024 entries by default, counts
// the learned ones of all), and a 100-node mesh needs 9,900: past the bound ARP fails ("neighbor
// table overflow") and sessions stay in Connect. Permanent entries are not counted.
func staticNeighbors(i int, addrs, addrs6 []netip.Prefix) []string {
	var out []string
	for _, fam := range [][]netip.Prefix{addrs, addrs6} {
		if i >= len(fam) || !fam[i].IsValid() {
			continue
		}
		for j, a := range fam {
			if j != i && a.IsValid() {
				out = append(out, fmt.Sprintf("neigh replace %s lladdr %s dev eth0 nud permanent", a.Addr(), nodeMAC(j)))
			}
		}
	}
	return out
}

// command returns a command that runs in node i's namespace.
func (l *netLab) command(i int, name string, args ...string) *exec.Cmd {
	return exec.Command(l.ip, append([]string{"netns", "exec", l.ns(i), name}, args...)...)
}

// close deletes every namespace it created (and with them the veth pairs and the bridge).
func (l *netLab) close() {
	l.mu.Lock()
	names := l.created
	l.created = nil
	l.mu.Unlock()
	if len(names) == 0 {
		return
	}
	var del []string
	for _, n := range names {
		del = append(del, "netns del "+n)
	}
	if err := l.batch("", del); err != nil {
		// One by one, so that one failure does not keep the others.
		for _, n := range names {
			_ = l.batch("", []string{"netns del " + n})
		}
	}
}
