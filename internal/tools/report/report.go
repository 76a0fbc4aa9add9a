// Package report prints plans for people: the design's statistics table and the route reflectors
// by zone.
//
// Offline tool: the plan and verify commands call it.
package report

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
)

// PlanTable writes the statistics table, the route reflectors by zone, any Degraded condition, why
// each draining route reflector drains and which nodes a score ranked down.
func PlanTable(w io.Writer, r *extender.Result) error {
	s := r.Summary
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "Policy %q, topology %s\n\n", r.Policy, s.Topology)
	rows := [][2]string{
		{"# of nodes", fmt.Sprint(s.Nodes)},
		{"# of healthy nodes", fmt.Sprint(s.HealthyNodes)},
		{"# of eligible nodes", fmt.Sprint(s.EligibleNodes)},
		{"# of RRs", fmt.Sprint(s.RouteReflectors)},
		{"# of cluster IDs", fmt.Sprint(s.ClusterIDs)},
		{"Redundancy", fmt.Sprint(s.Redundancy)},
		{"# of clients / RR", fmt.Sprint(s.MaxClientsPerRouteReflector)},
		{"# of RRs / RR", fmt.Sprint(s.MaxRouteReflectorsPerRR)},
		{"Connections / RR", fmt.Sprint(s.MaxConnectionsPerRouteReflector)},
		{"# of BGPPeers", fmt.Sprint(s.BGPPeers)},
	}
	if s.DrainingRouteReflectors > 0 {
		rows = append(rows, [2]string{"# of draining RRs", fmt.Sprint(s.DrainingRouteReflectors)})
	}
	for _, row := range rows {
		fmt.Fprintf(tw, "%s\t| %s\n", row[0], row[1])
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "ZONE\tNODES\tDESIRED\tRRS\tCLUSTER IDS\tROUTE REFLECTORS")
	byZone := map[string][]string{}
	for _, rr := range r.RouteReflectors {
		name := rr.Node
		if rr.Draining {
			name += " (draining)"
		}
		byZone[rr.Zone] = append(byZone[rr.Zone], name)
	}
	for _, z := range r.Zones {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\n", extender.ZoneName(z.Zone), z.Nodes, z.Desired, z.RouteReflectors,
			strings.Join(z.ClusterIDs, ","), abbreviate(byZone[z.Zone], 6))
	}
	for _, c := range r.Conditions {
		fmt.Fprintf(tw, "\n%s: %s: %s\n", c.Type, c.Reason, c.Message)
	}
	why := map[string]string{}
	for _, in := range r.Ineligible {
		why[in.Node] = in.Reason
	}
	for _, rr := range r.RouteReflectors {
		if rr.Draining && why[rr.Node] != "" {
			fmt.Fprintf(tw, "\nDraining %s: %s\n", rr.Node, why[rr.Node])
		}
	}
	if len(r.ScoredDown) > 0 {
		fmt.Fprintf(tw, "\nScored down: %d nodes (picked after the others; -o json lists them under scoredDown)\n", len(r.ScoredDown))
		for _, s := range r.ScoredDown {
			if s.RouteReflector {
				fmt.Fprintf(tw, "Route reflector %s scored down by %s: %s (%s)\n", s.Node, s.Score, s.Reason, s.Detail)
			}
		}
	}
	return tw.Flush()
}

func abbreviate(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ",")
	}
	return strings.Join(names[:n], ",") + fmt.Sprintf(",... (%d more)", len(names)-n)
}
