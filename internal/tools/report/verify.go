//go:build !slim

package report

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/tools/bgpverify"
)

// VerifyTable writes the outcome of a verify run: the figures of each convergence and, per node,
// its sessions, routes and the blocks it misses.
func VerifyTable(w io.Writer, r *bgpverify.Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "Policy %q on %s speakers\n\n", r.Policy, r.Speaker)
	phase(tw, "", r.Summary, r.Nodes)
	if line := renderedLine(r.Rendered); line != "" {
		fmt.Fprintf(tw, "\nSession settings confd rendered (BGPPeer password, maxRestartTime, ttlSecurity): %s\n", line)
	}
	if a := r.AfterFailure; a != nil {
		fmt.Fprintf(tw, "\nAfter stopping %d speakers (%s):\n\n", len(a.Down), abbreviate(a.Down, 6))
		phase(tw, "", a.Summary, a.Nodes)
	}
	if len(r.Families) > 0 {
		// Per address family (bird.cfg on BIRD, bird6.cfg on BIRD6): every phase's missing pairs.
		fmt.Fprintf(tw, "\nPer address family (missing node pairs, graph model in brackets):\n\n")
		fmt.Fprintln(tw, "FAMILY\tNODES\tSESSIONS\tFRESH\tAFTER FAILURE\tDRILLS (EACH ZONE, EACH RR)")
		for _, k := range slices.Sorted(maps.Keys(r.Families)) {
			f := r.Families[k]
			after := "-"
			if f.AfterFailure != nil {
				after = fmt.Sprintf("%d (%d)", f.AfterFailure.Summary.MissingPairs, f.AfterFailure.Summary.ModelMissingPairs)
			}
			drills := "-"
			if len(f.Drills) > 0 {
				worst, passed := 0, 0
				for _, d := range f.Drills {
					worst = max(worst, d.Summary.MissingPairs)
					if d.Summary.MissingPairs == 0 {
						passed++
					}
				}
				drills = fmt.Sprintf("%d of %d with 0, worst %d", passed, len(f.Drills), worst)
			}
			fmt.Fprintf(tw, "%s\t%d\t%d (%d established)\t%d (%d)\t%s\t%s\n", k, f.Summary.Nodes, f.Summary.Sessions, f.Summary.EstablishedSessions,
				f.Summary.MissingPairs, f.Summary.ModelMissingPairs, after, drills)
		}
	}
	return tw.Flush()
}

func phase(tw *tabwriter.Writer, _ string, s bgpverify.Summary, nodes []bgpverify.NodeReport) {
	conv := fmt.Sprintf("%.1fs", s.ConvergedSeconds)
	if !s.Converged {
		conv = "not converged (stopped at " + conv + ")"
	}
	rows := [][2]string{
		{"# of nodes", fmt.Sprint(s.Nodes)},
		{"# of sessions", fmt.Sprintf("%d (%d established)", s.Sessions, s.EstablishedSessions)},
		{"Converged in", conv},
		{"Missing routes (node pairs)", fmt.Sprintf("%d (graph model: %d)", s.MissingPairs, s.ModelMissingPairs)},
		{"Routes on the busiest node", fmt.Sprintf("%d on %s (graph model: %s)", s.MaxRoutesPerNode, s.BusiestNode, num(s.ModelMaxRoutesPerNode))},
	}
	if s.StaleBlocks > 0 {
		rows = append(rows, [2]string{"Stale blocks of stopped nodes", fmt.Sprintf("%d (kept for BGP graceful restart)", s.StaleBlocks)})
	}
	if s.MaxMemoryKiB > 0 {
		rows = append(rows, [2]string{"BIRD memory", fmt.Sprintf("%d KiB largest, %d KiB total", s.MaxMemoryKiB, s.TotalMemoryKiB)})
	}
	for _, row := range rows {
		fmt.Fprintf(tw, "%s\t| %s\n", row[0], row[1])
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "NODE\tZONE\tADDRESS\tBLOCK\tCLUSTER ID\tSESSIONS\tROUTES\tMODEL\tBLOCKS\tMISSING")
	for _, n := range nodes {
		if n.Down {
			continue
		}
		missing := "-"
		if len(n.Missing) > 0 {
			missing = fmt.Sprintf("%d: %s", len(n.Missing), abbreviate(n.Missing, 4))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d/%d\t%d\t%s\t%d\t%s\n", n.Name, n.Zone, n.Address, n.Block, dash(n.ClusterID),
			n.Established, n.Sessions, n.Routes, num(n.ModelRoutes), n.Blocks, missing)
	}
}

// renderedLine sums up the session settings of the BGP protocols confd rendered; "" when there
// are none (or no confd run).
func renderedLine(r *bgpverify.RenderedSettings) string {
	if r == nil || r.Password == 0 && len(r.RestartTime) == 0 && r.TTLSecurity == 0 {
		return ""
	}
	parts := []string{fmt.Sprintf("%d of %d BGP protocols with a password", r.Password, r.Protocols)}
	for _, t := range slices.Sorted(maps.Keys(r.RestartTime)) {
		parts = append(parts, fmt.Sprintf("%d with graceful restart time %s s", r.RestartTime[t], t))
	}
	if r.TTLSecurity > 0 {
		parts = append(parts, fmt.Sprintf("%d with ttl security", r.TTLSecurity))
	}
	return strings.Join(parts, ", ")
}
