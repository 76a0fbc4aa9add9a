package serve

import (
	"os"
	"runtime/debug"
)

// DefaultGOGC is the garbage collector's target percentage the serve process runs with when the
// environment does not set GOGC: the heap may grow by half its live set between collections,
// where Go's default, 100, lets it double. The product's live heap is its long-lived node cache
// and plans, so the collections this costs are few (make load: 1.2% of a core during the
// heartbeats at 5,000 nodes); the memory they save is the difference between the heap's live set
// and its goal, about a tenth of the process's RSS (BENCHMARKS.md).
const DefaultGOGC = 50

// EnvGOGC is Go's variable for the collector's target.
const EnvGOGC = "GOGC"

// TuneGC sets the collector's target to DefaultGOGC unless GOGC is set (to any value, "off"
// included), and returns the target in force. GOMEMLIMIT (the chart sets it from the container's
// memory limit) applies on top, either way.
func TuneGC() int {
	if _, set := os.LookupEnv(EnvGOGC); set {
		cur := debug.SetGCPercent(100)
		debug.SetGCPercent(cur)
		return cur
	}
	debug.SetGCPercent(DefaultGOGC)
	return DefaultGOGC
}
