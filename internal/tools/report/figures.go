package report

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
)

// RouteFigures writes the graph model's figures for a plan: routes on the busiest node and paths
// per prefix (with Calico's ADD-PATH every distinct path is stored), and whether every node learns
// every other node's block; then the failure drills (each zone, each route reflector lost).
func RouteFigures(w io.Writer, s bgpmodel.Summary, c bgpmodel.Cost, drills []extender.Drill) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	rows := [][2]string{
		{"Routes on the busiest node", fmt.Sprintf("%s (%s)", num(s.MaxRoutesPerNode), s.BusiestNode)},
		{"Paths per prefix (busiest / mean node)", fmt.Sprintf("%.1f / %.1f", c.BusiestPaths, c.MeanPaths)},
		{"Default layout (" + c.DefaultLayout + ")", fmt.Sprintf("%.1f / %.1f", c.DefaultBusiest, c.DefaultMean)},
		{"Paths of one prefix, all nodes (max / mean)", num(s.MaxPathsPerPrefix) + " / " + num(s.MeanPathsPerPrefix)},
		{"Missing routes (node pairs)", fmt.Sprint(s.MissingPairs)},
		{"BGP sessions", fmt.Sprint(s.Sessions)},
	}
	rows = append(rows, drillRows(drills)...)
	for _, row := range rows {
		fmt.Fprintf(tw, "%s\t| %s\n", row[0], row[1])
	}
	return tw.Flush()
}

// drillRows are the failure drills' rows: how many of each kind pass, then each failing drill.
func drillRows(drills []extender.Drill) [][2]string {
	if len(drills) == 0 {
		return nil
	}
	t := extender.TallyDrills(drills)
	z, r := t[extender.DrillZone], t[extender.DrillRouteReflector]
	rows := [][2]string{{"Failure drills passed (zones / route reflectors)", fmt.Sprintf("%d of %d / %d of %d", z.Pass, z.All, r.Pass, r.All)}}
	for _, d := range extender.FailedDrills(drills) {
		rows = append(rows, [2]string{"FAILING DRILL", d.String()})
	}
	return rows
}

// num prints a route count: an integer below a billion, else in scientific notation.
func num(v float64) string {
	if v < 1e9 {
		s := strconv.FormatFloat(v, 'f', 0, 64)
		if strings.Contains(strconv.FormatFloat(v, 'f', -1, 64), ".") {
			s = strconv.FormatFloat(v, 'f', 1, 64)
		}
		return s
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
