//go:build !slim

package report

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/tools/bgpverify"
)

// TransitionTable writes a replayed transition (verify --from): what BIRD did while the plan was
// applied, beside the graph model's figures for the same change.
func TransitionTable(w io.Writer, t *bgpverify.TransitionReport) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	m, mo := t.Measured, t.Model
	dead := "none"
	if len(t.Dead) > 0 {
		dead = abbreviate(t.Dead, 6)
	}
	fmt.Fprintf(tw, "Transition from the state given to the plan (dead nodes: %s; the state before converged in %.1fs, %d node pairs missing):\n\n",
		dead, t.Before.ConvergedSeconds, t.Before.MissingPairs)
	fmt.Fprintf(tw, "\t| measured on BIRD (every %gs, %d samples over %.1fs)\t| graph model\n", m.IntervalSeconds, m.Samples, m.DurationSeconds)
	gap := "0s"
	if m.MissingPairSamples > 0 {
		gap = fmt.Sprintf("%.1fs (%s)", m.LongestGapSeconds, m.LongestGapPair)
	}
	keeping := fmt.Sprint(m.MissingPairSamplesKeepingRole)
	if len(m.MissingKeepingRole) > 0 {
		keeping += ": " + strings.Join(head(m.MissingKeepingRole, 4), " ")
	}
	atRisk := fmt.Sprint(mo.PairsAtRisk)
	if len(mo.AtRisk) > 0 {
		var ps []string
		for _, p := range head(mo.AtRisk, 4) {
			ps = append(ps, p[0]+"->"+p[1])
		}
		atRisk += ": " + strings.Join(ps, " ")
	}
	var steps []string
	for _, s := range mo.Steps {
		steps = append(steps, fmt.Sprintf("%s %d (%d pairs)", s.Kind, s.Sessions, s.MissingPairs))
	}
	rows := [][3]string{
		{"Sessions", fmt.Sprintf("%d configures, changed protocols %s", m.Configures, counts(m.ChangedProtocols)),
			fmt.Sprintf("%d added, %d removed, %d restarted", mo.Added, mo.Removed, mo.Restarted)},
		{"Sessions restarted by node", fmt.Sprintf("%d: %s", m.SessionsRestarted, counts(m.RestartsByNode)), counts(mo.RestartsByNode)},
		{"Missing pair-samples", fmt.Sprintf("%d (%d pairs)", m.MissingPairSamples, m.MissingPairs), "pairs at risk in one step: " + atRisk},
		{"  between nodes keeping their role", keeping, ""},
		{"Longest gap", gap, "steps: " + dash(strings.Join(steps, ", "))},
		{"Busiest node's routes", fmt.Sprintf("%d at the start, peak %d (%s)", m.RoutesAtStart, m.PeakRoutes, dash(m.PeakNode)),
			fmt.Sprintf("%s -> peak %s -> %s", num(mo.RoutesBefore), num(mo.PeakRoutes), num(mo.RoutesAfter))},
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t| %s\t| %s\n", r[0], r[1], r[2])
	}
	return tw.Flush()
}

func counts(c []bgpmodel.NodeCount) string {
	if len(c) == 0 {
		return "none"
	}
	var parts []string
	for _, nc := range head(c, 8) {
		parts = append(parts, fmt.Sprintf("%s:%d", nc.Node, nc.Count))
	}
	if len(c) > 8 {
		parts = append(parts, fmt.Sprintf("(+%d)", len(c)-8))
	}
	return strings.Join(parts, " ")
}

func head[T any](s []T, n int) []T { return s[:min(n, len(s))] }
