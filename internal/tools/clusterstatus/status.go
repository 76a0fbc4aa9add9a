// Package clusterstatus reads a live cluster through its API server and reports, per
// RouteReflectorPolicy, what the product manages there: the mode, the route reflectors per zone
// with their clients, those being handed over with their age, the hand-written BGPPeers beside the
// product's, what Observe or Paused would change, and the graph model's figures for the cluster's
// actual nodes and BGPPeers. The `status` command (also installed as the kubectl plugin `kubectl
// rr`) prints it.
//
// Offline tool: the status command calls it.
package clusterstatus

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calico"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// Report is the state of every policy of a cluster.
type Report struct {
	Policies []PolicyReport `json:"policies"`
	// ForeignBGPPeers are the BGPPeers this product did not write.
	ForeignBGPPeers []string `json:"foreignBGPPeers"`
	// NodeToNodeMesh is Calico's node-to-node mesh setting (BGPConfiguration default).
	NodeToNodeMesh bool `json:"nodeToNodeMesh"`
	// Routes is the graph model on the cluster's actual nodes and BGPPeers.
	Routes RouteFigures `json:"routes"`
}

// PolicyReport is one policy.
type PolicyReport struct {
	Name            string       `json:"name"`
	Mode            string       `json:"mode"`
	Topology        string       `json:"topology"`
	Nodes           int          `json:"nodes"`
	RouteReflectors int          `json:"routeReflectors"`
	Desired         int32        `json:"desiredRouteReflectors"`
	Ready           string       `json:"ready"`
	Zones           []ZoneReport `json:"zones"`
	Draining        []Draining   `json:"draining"`
	Pending         []string     `json:"pendingChanges"`
	Invalid         string       `json:"invalid,omitempty"`
}

// ZoneReport is one zone of a policy: its route reflectors and how many clients each has.
type ZoneReport struct {
	Zone            string           `json:"zone"`
	Nodes           int              `json:"nodes"`
	RouteReflectors []RouteReflector `json:"routeReflectors"`
}

// RouteReflector is a route reflector with its cluster ID, its clients, its address families and,
// when the product keeps a CalicoNodeStatus for it (bgpHealth, the BGPSessions handover), its BGP
// sessions per family.
type RouteReflector struct {
	Node      string `json:"node"`
	ClusterID string `json:"clusterID"`
	Clients   int    `json:"clients"`
	// Families are the node's address families (extender.FamiliesOf its Calico addresses): "IPv4",
	// "IPv6" or "IPv4+IPv6".
	Families string `json:"families"`
	// Sessions are the BGP sessions its CalicoNodeStatus lists, per family (none: no status).
	Sessions []FamilySessions `json:"bgpSessions,omitempty"`
}

// FamilySessions counts a route reflector's BGP sessions of one address family (peersV4 or
// peersV6 of its CalicoNodeStatus). A family with none Established is down (README: BGP health).
type FamilySessions struct {
	Family      string `json:"family"`
	Established int    `json:"established"`
	Listed      int    `json:"listed"`
}

// Draining is a route reflector being handed over, and for how long.
type Draining struct {
	Node     string           `json:"node"`
	Since    string           `json:"since"`
	Age      string           `json:"age"`
	Families string           `json:"families"`
	Sessions []FamilySessions `json:"bgpSessions,omitempty"`
}

// RouteFigures are the graph model's figures for the cluster as it is.
type RouteFigures struct {
	Nodes        int     `json:"nodes"`
	MissingPairs int64   `json:"missingPairs"`
	BusiestPaths float64 `json:"busiestPathsPerPrefix"`
	MeanPaths    float64 `json:"meanPathsPerPrefix"`
	// Drills are the failure drills on the cluster as it is: each zone lost, each route
	// reflector lost; in each address family (Drill.Family) when a node has an IPv6 address.
	Drills []extender.Drill `json:"drills"`
	// Families (when a node has an IPv6 address) are the figures in each address family, on the
	// sessions both of whose ends have an address of it; the figures above stay family-blind.
	Families []FamilyFigures `json:"families,omitempty"`
	Error    string          `json:"error,omitempty"`
}

// FamilyFigures are the graph model's figures for the cluster as it is in one address family.
type FamilyFigures struct {
	Family       string  `json:"family"`
	Nodes        int     `json:"nodes"`
	MissingPairs int64   `json:"missingPairs"`
	BusiestPaths float64 `json:"busiestPathsPerPrefix"`
	MeanPaths    float64 `json:"meanPathsPerPrefix"`
}

// Calico holds the Calico objects status reads from Calico's datastore when that is not the
// Kubernetes API (etcd): the BGPPeers, the BGPConfigurations and the Calico Nodes' BGP addresses
// (the nodes' address families: the Kubernetes Nodes do not carry them with this datastore).
type Calico struct {
	Peers     []apiv3.BGPPeer
	Configs   []apiv3.BGPConfiguration
	Addresses map[string]extender.CalicoAddresses
}

// Read reads the cluster. gv is the Calico API the BGPPeers and the BGPConfiguration are read
// through, unless fromDatastore (Calico's etcd) holds them.
func Read(ctx context.Context, cfg *rest.Config, gv schema.GroupVersion, now time.Time, fromDatastore *Calico) (*Report, error) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	if err := calico.AddToScheme(scheme, gv); err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("connecting to the API server: %w", err)
	}
	nodes := &corev1.NodeList{}
	if err := c.List(ctx, nodes); err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	pols := &v1alpha1.RouteReflectorPolicyList{}
	if err := c.List(ctx, pols); err != nil {
		return nil, fmt.Errorf("listing RouteReflectorPolicies: %w", err)
	}
	cal := fromDatastore
	if cal == nil {
		peers := &apiv3.BGPPeerList{}
		if err := c.List(ctx, peers); err != nil {
			return nil, fmt.Errorf("listing BGPPeers: %w", err)
		}
		cal = &Calico{Peers: peers.Items}
		cfgObj := &apiv3.BGPConfiguration{}
		if err := c.Get(ctx, client.ObjectKey{Name: "default"}, cfgObj); err == nil {
			cal.Configs = []apiv3.BGPConfiguration{*cfgObj}
		}
	}
	rep := &Report{NodeToNodeMesh: true, ForeignBGPPeers: []string{}, Policies: []PolicyReport{}}
	for _, c := range cal.Configs {
		if c.Name == "default" && c.Spec.NodeToNodeMeshEnabled != nil {
			rep.NodeToNodeMesh = *c.Spec.NodeToNodeMeshEnabled
		}
	}
	for _, p := range cal.Peers {
		if p.Labels[extender.LabelManagedBy] != extender.ManagedByValue {
			rep.ForeignBGPPeers = append(rep.ForeignBGPPeers, p.Name)
		}
	}
	slices.Sort(rep.ForeignBGPPeers)
	ptrs := make([]*extender.Node, len(nodes.Items))
	for i := range nodes.Items {
		ptrs[i] = extender.FromNode(&nodes.Items[i])
	}
	slices.SortFunc(ptrs, func(a, b *extender.Node) int { return strings.Compare(a.Name, b.Name) })
	ptrs = extender.WithCalicoAddresses(ptrs, cal.Addresses)
	slices.SortFunc(pols.Items, func(a, b v1alpha1.RouteReflectorPolicy) int { return strings.Compare(a.Name, b.Name) })
	// The product's CalicoNodeStatuses (bgpHealth, the BGPSessions handover), when the API serves
	// them: with the etcd datastore, or without the right to read them, the sessions are left out.
	statuses := map[string]*apiv3.CalicoNodeStatus{}
	cnsList := &apiv3.CalicoNodeStatusList{}
	if err := c.List(ctx, cnsList, client.MatchingLabels{extender.LabelManagedBy: extender.ManagedByValue}); err == nil {
		for i := range cnsList.Items {
			statuses[cnsList.Items[i].Spec.Node] = &cnsList.Items[i]
		}
	}
	for i := range pols.Items {
		rep.Policies = append(rep.Policies, policyReport(&pols.Items[i], ptrs, statuses, now))
	}
	rep.Routes = routeFigures(ptrs, cal.Peers, rep.NodeToNodeMesh)
	return rep, nil
}

// familySessions counts a status's sessions per family, the families it lists (nil without one).
func familySessions(cns *apiv3.CalicoNodeStatus) []FamilySessions {
	if cns == nil || cns.Status.LastUpdated.IsZero() {
		return nil
	}
	var out []FamilySessions
	for _, f := range []struct {
		fam   extender.Families
		peers []apiv3.CalicoNodePeer
	}{{extender.FamilyIPv4, cns.Status.BGP.PeersV4}, {extender.FamilyIPv6, cns.Status.BGP.PeersV6}} {
		if len(f.peers) == 0 {
			continue
		}
		fs := FamilySessions{Family: f.fam.String(), Listed: len(f.peers)}
		for _, p := range f.peers {
			if p.State == apiv3.BGPSessionStateEstablished {
				fs.Established++
			}
		}
		out = append(out, fs)
	}
	if out == nil {
		out = []FamilySessions{} // filled in, nothing listed: BIRD does not answer
	}
	return out
}

func policyReport(pol *v1alpha1.RouteReflectorPolicy, nodes []*extender.Node, statuses map[string]*apiv3.CalicoNodeStatus, now time.Time) PolicyReport {
	pr := PolicyReport{Name: pol.Name, Mode: string(pol.Status.Mode), Desired: pol.Status.DesiredRouteReflectors,
		Pending: pol.Status.PendingChanges, Zones: []ZoneReport{}, Draining: []Draining{}}
	if pr.Pending == nil {
		pr.Pending = []string{}
	}
	for _, c := range pol.Status.Conditions {
		if c.Type == "Ready" {
			pr.Ready = string(c.Status) + " (" + c.Reason + ")"
		}
	}
	r, errs := policy.Resolve(pol)
	if len(errs) > 0 {
		pr.Invalid = errs.ToAggregate().Error()
		return pr
	}
	if pr.Mode == "" {
		pr.Mode = string(r.Mode)
	}
	pr.Topology = string(r.Topology)
	clients := map[string]int{}
	zones := map[string]*ZoneReport{}
	var names []string
	for _, n := range nodes {
		if !r.NodeSelector.Matches(labels.Set(n.Labels)) {
			continue
		}
		pr.Nodes++
		z := n.Labels[r.ZoneLabel]
		if zones[z] == nil {
			zones[z] = &ZoneReport{Zone: z, RouteReflectors: []RouteReflector{}}
			names = append(names, z)
		}
		zones[z].Nodes++
		if rrs := n.Annotations[extender.AnnotationRouteReflectors]; rrs != "" {
			for _, rr := range strings.Split(rrs, ",") {
				clients[rr]++
			}
		}
	}
	for _, n := range nodes {
		if !r.NodeSelector.Matches(labels.Set(n.Labels)) || !r.IsRouteReflectorLabel(n.Labels) {
			continue
		}
		id, ok := policy.ParseClusterID(n.Annotations[extender.AnnotationClusterID])
		if !ok {
			continue
		}
		if since := n.Annotations[extender.AnnotationDrainingSince]; since != "" {
			d := Draining{Node: n.Name, Since: since, Families: extender.NodeFamilies(n).String(), Sessions: familySessions(statuses[n.Name])}
			if t, err := time.Parse(time.RFC3339, since); err == nil {
				d.Age = now.Sub(t).Round(time.Second).String()
			}
			pr.Draining = append(pr.Draining, d)
			continue
		}
		pr.RouteReflectors++
		zr := zones[n.Labels[r.ZoneLabel]]
		zr.RouteReflectors = append(zr.RouteReflectors, RouteReflector{Node: n.Name, ClusterID: policy.ClusterIDString(id), Clients: clients[n.Name],
			Families: extender.NodeFamilies(n).String(), Sessions: familySessions(statuses[n.Name])})
	}
	slices.Sort(names)
	for _, z := range names {
		pr.Zones = append(pr.Zones, *zones[z])
	}
	return pr
}

func routeFigures(nodes []*extender.Node, peers []apiv3.BGPPeer, mesh bool) RouteFigures {
	f := RouteFigures{Nodes: len(nodes)}
	topo, err := bgpmodel.FromCluster(nodes, peers, corev1.LabelTopologyZone, bgpmodel.Options{NodeToNodeMesh: mesh})
	if err != nil {
		f.Error = err.Error()
		return f
	}
	m, err := topo.Propagate(nil)
	if err != nil {
		f.Error = err.Error()
		return f
	}
	f.MissingPairs = m.Summary.MissingPairs
	if n := float64(m.Summary.Nodes); n > 0 {
		f.BusiestPaths, f.MeanPaths = m.Summary.MaxRoutesPerNode/n, m.Summary.TotalRoutes/n/n
	}
	fams, err := topo.FamilyCosts()
	if err != nil {
		f.Error = err.Error()
		return f
	}
	for _, c := range fams {
		f.Families = append(f.Families, FamilyFigures{Family: c.Family.String(), Nodes: c.Nodes, MissingPairs: c.MissingPairs,
			BusiestPaths: c.BusiestPaths, MeanPaths: c.MeanPaths})
	}
	if f.Drills, err = topo.FamilyDrills(); err != nil {
		f.Error = "failure drills: " + err.Error()
	}
	return f
}

// JSON writes the report as indented JSON.
func JSON(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Table writes the report for people.
func Table(w io.Writer, r *Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, p := range r.Policies {
		fmt.Fprintf(tw, "POLICY %s\tmode %s\ttopology %s\tnodes %d\troute reflectors %d (desired %d)\tready %s\n",
			p.Name, p.Mode, dash(p.Topology), p.Nodes, p.RouteReflectors, p.Desired, dash(p.Ready))
		if p.Invalid != "" {
			fmt.Fprintf(tw, "  invalid: %s\n", p.Invalid)
			continue
		}
		fmt.Fprintln(tw, "  ZONE\tNODES\tROUTE REFLECTOR\tCLUSTER ID\tCLIENTS\tFAMILIES\tBGP SESSIONS (ESTABLISHED/LISTED)")
		for _, z := range p.Zones {
			if len(z.RouteReflectors) == 0 {
				fmt.Fprintf(tw, "  %s\t%d\t-\t-\t-\t-\t-\n", dash(z.Zone), z.Nodes)
			}
			for i, rr := range z.RouteReflectors {
				zone, count := dash(z.Zone), fmt.Sprint(z.Nodes)
				if i > 0 {
					zone, count = "", ""
				}
				fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%d\t%s\t%s\n", zone, count, rr.Node, rr.ClusterID, rr.Clients, rr.Families, sessionsText(rr.Sessions))
			}
		}
		for _, d := range p.Draining {
			line := fmt.Sprintf("  handover in flight: %s draining since %s (%s); %s", d.Node, d.Since, d.Age, d.Families)
			if d.Sessions != nil {
				line += "; BGP sessions " + sessionsText(d.Sessions)
			}
			fmt.Fprintln(tw, line)
		}
		for _, c := range p.Pending {
			fmt.Fprintf(tw, "  %s would: %s\n", p.Mode, c)
		}
	}
	if len(r.ForeignBGPPeers) > 0 {
		fmt.Fprintf(tw, "Foreign BGPPeers (not written by calico-rr-autoscaler): %s\n", strings.Join(r.ForeignBGPPeers, ", "))
	}
	fmt.Fprintf(tw, "Node-to-node mesh: %v\n", onOff(r.NodeToNodeMesh))
	if r.Routes.Error != "" {
		fmt.Fprintf(tw, "Routes (graph model): %s\n", r.Routes.Error)
	} else {
		fmt.Fprintf(tw, "Routes (graph model, %d nodes as they are): %d node pairs missing; paths per prefix %.1f on the busiest node, %.1f on the mean\n",
			r.Routes.Nodes, r.Routes.MissingPairs, r.Routes.BusiestPaths, r.Routes.MeanPaths)
		for _, f := range r.Routes.Families {
			fmt.Fprintf(tw, "  %s (%d nodes with an %s address): %d node pairs missing; paths per prefix %.1f on the busiest node, %.1f on the mean\n",
				f.Family, f.Nodes, f.Family, f.MissingPairs, f.BusiestPaths, f.MeanPaths)
		}
		t := extender.TallyDrills(r.Routes.Drills)
		z, rr := t[extender.DrillZone], t[extender.DrillRouteReflector]
		in := ""
		if len(r.Routes.Families) > 0 {
			in = " in every family"
		}
		fmt.Fprintf(tw, "Failure drills (the cluster as it is): zones %d of %d pass, route reflectors %d of %d pass%s\n", z.Pass, z.All, rr.Pass, rr.All, in)
		for _, d := range extender.FailedDrills(r.Routes.Drills) {
			fmt.Fprintf(tw, "  FAILING: %s\n", d)
		}
	}
	return tw.Flush()
}

// sessionsText prints a route reflector's sessions per family ("IPv4 8/8, IPv6 0/8 DOWN"): "-"
// without a CalicoNodeStatus, "none" when it lists no session.
func sessionsText(fs []FamilySessions) string {
	if fs == nil {
		return "-"
	}
	if len(fs) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(fs))
	for _, f := range fs {
		s := fmt.Sprintf("%s %d/%d", f.Family, f.Established, f.Listed)
		if f.Established == 0 {
			s += " DOWN"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
