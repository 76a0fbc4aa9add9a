package load

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// monitor samples the product's resident set (every second, from /proc) and Go heap in use
// (every second, from its metrics) for the whole test, so that each phase's peak and mean are
// known, not only the values at the phase's ends.
type monitor struct {
	p    *product
	mu   sync.Mutex
	pts  []memPoint
	stop chan struct{}
	done chan struct{}
}

type memPoint struct {
	at        time.Time
	rss, heap int64 // bytes; heap -1 when the scrape failed
}

func startMonitor(p *product) *monitor {
	m := &monitor{p: p, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			m.sample()
			select {
			case <-m.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return m
}

func (m *monitor) sample() {
	pt := memPoint{at: time.Now(), rss: -1, heap: -1}
	if v, err := readProcStatus(m.p.Cmd.Process.Pid, "VmRSS:"); err == nil {
		pt.rss = v
	}
	if ms, err := m.p.tryScrape(); err == nil {
		pt.heap = int64(ms.sum("go_memstats_heap_inuse_bytes", nil))
	}
	m.mu.Lock()
	m.pts = append(m.pts, pt)
	m.mu.Unlock()
}

func (m *monitor) Stop() {
	select {
	case <-m.stop:
	default:
		close(m.stop)
	}
	<-m.done
}

// memStats is the samples of [from, to]: RSS peak and mean, heap peak, in bytes.
type memStats struct {
	n                      int
	rssMax, rssMean, hpMax int64
}

func (m *monitor) between(from, to time.Time) memStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	var s memStats
	var sum int64
	for _, pt := range m.pts {
		if pt.at.Before(from) || pt.at.After(to) || pt.rss < 0 {
			continue
		}
		s.n++
		sum += pt.rss
		s.rssMax = max(s.rssMax, pt.rss)
		s.hpMax = max(s.hpMax, pt.heap)
	}
	if s.n > 0 {
		s.rssMean = sum / int64(s.n)
	}
	return s
}

func (s memStats) String() string {
	return fmt.Sprintf("peak %d / mean %d MiB RSS, heap peak %d MiB (%d samples)", s.rssMax>>20, s.rssMean>>20, s.hpMax>>20, s.n)
}

func readProcStatus(pid int, key string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == key {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", key, pid)
}

// cpuSeconds is the CPU time (user + system) the process has used, from /proc/<pid>/stat.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name may hold spaces: the fields count from the last ')'.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	s, _ := strconv.ParseFloat(f[12], 64)
	return (u + s) / 100 // USER_HZ
}

func (p *product) tryScrape() (metricSet, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", p.MetricsPort))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return parseMetrics(b), nil
}

// profile saves the product's pprof profile (heap, or profile?seconds=N for CPU) into -load-profiles
// as name, when that flag is set; it logs rather than fails (a profile is a diagnosis, not a check).
func (p *product) profile(ctx context.Context, t *testing.T, path, name string) {
	if *profileDir == "" {
		return
	}
	b, err := p.pprof(ctx, path)
	saveProfile(t, path, name, b, err)
}

// saveProfile writes a fetched profile (b, or the fetch's error) into -load-profiles as name, and
// logs where it went or why it did not.
func saveProfile(t *testing.T, path, name string, b []byte, err error) {
	if err == nil {
		err = os.MkdirAll(*profileDir, 0o755)
	}
	if err == nil {
		f := filepath.Join(*profileDir, name)
		if err = os.WriteFile(f, b, 0o644); err == nil {
			t.Logf("profile %s: %s", path, f)
			return
		}
	}
	t.Logf("profile %s: %v", path, err)
}

// pprof fetches /debug/pprof/path from the product (serve --profiling).
func (p *product) pprof(ctx context.Context, path string) ([]byte, error) {
	c := http.Client{Timeout: 2 * time.Minute}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/%s", p.MetricsPort, path), nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("HTTP %d: %.200s", resp.StatusCode, b)
	}
	return b, err
}

// liveHeap is the product's Go heap right after a collection (heap?gc=1 runs one): the bytes of
// its live objects (what its caches and plans hold) and the bytes of the spans they occupy (the
// live objects and the free slots between them), without the garbage RSS carries until the next
// cycle.
func (p *product) liveHeap(ctx context.Context, t *testing.T) (objects, spans float64) {
	t.Helper()
	_, err := p.pprof(ctx, "heap?gc=1")
	require.NoError(t, err, "heap?gc=1")
	m := p.scrape(t)
	return m.sum("go_memstats_heap_alloc_bytes", nil), m.sum("go_memstats_heap_inuse_bytes", nil)
}

// clientRequests is the product's requests to the API server (client-go's rest_client_requests_total),
// by method.
func clientRequests(m metricSet) map[string]float64 {
	out := map[string]float64{}
	for _, s := range m {
		if s.name == "rest_client_requests_total" {
			out[s.labels["method"]] += s.value
		}
	}
	return out
}

// requestRate is the product's requests per second to the API server between two scrapes, total
// and by method.
func requestRate(before, after metricSet, d time.Duration) string {
	b, a := clientRequests(before), clientRequests(after)
	total := 0.0
	var parts []string
	for _, meth := range []string{"GET", "LIST", "WATCH", "POST", "PUT", "PATCH", "DELETE"} {
		if v := a[meth] - b[meth]; v > 0 {
			total += v
			parts = append(parts, fmt.Sprintf("%s %.0f", meth, v))
		}
	}
	return fmt.Sprintf("%.1f/s (%.0f: %s)", total/d.Seconds(), total, strings.Join(parts, ", "))
}

// binaryPages is how much of the product's own binary is resident, by mapping: its code (r-x), its
// read-only data (r--: rodata, type links and the pclntab the runtime reads for stacks) and its
// data (rw-), in bytes, from /proc/<pid>/smaps.
func binaryPages(pid int) (code, rodata, data int64, err error) {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	var cur *int64
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 6 && strings.Contains(f[0], "-") && len(f[1]) == 4: // a mapping's header
			cur = nil
			if f[5] == exe {
				switch f[1][:3] {
				case "r-x":
					cur = &code
				case "r--":
					cur = &rodata
				case "rw-":
					cur = &data
				}
			}
		case len(f) >= 2 && f[0] == "Rss:" && cur != nil:
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return 0, 0, 0, err
			}
			*cur += kb << 10
		}
	}
	return code, rodata, data, nil
}
