package policy

import (
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// ScalingKind says which scaling rule a policy uses.
type ScalingKind int

// The scaling rules.
const (
	ScaleByRatio ScalingKind = iota
	ScaleBySteps
	ScaleByClients
)

// Resolved is a validated policy with every default filled in, in the form the planner uses.
type Resolved struct {
	Name string

	// NodeSelector selects the managed nodes; never nil.
	NodeSelector labels.Selector
	// Preferred and Forbidden select nothing when the policy leaves them out; never nil.
	Preferred labels.Selector
	Forbidden labels.Selector

	// Min and Max bound the route reflector count; Max is NoMaxRouteReflectors when uncapped.
	Min, Max int
	// MaxClientsPerRR bounds every route reflector's clients; 0: no bound.
	MaxClientsPerRR int

	Scaling            ScalingKind
	RatioNum, RatioDen int64
	Steps              []v1alpha1.Step
	ClientsPerRR       int

	Topology      v1alpha1.TopologyType
	BaseClusterID uint32
	ClusterIDMode v1alpha1.ClusterIDMode
	Groups        int
	Redundancy    int
	RackLabel     string
	MaxRackSize   int

	RRLabelKey, RRLabelValue string
	ZoneLabel                string
	Tolerations              []corev1.Toleration

	Mode          v1alpha1.Mode
	RemovalDelay  time.Duration
	NotReadyGrace time.Duration
	// BGPHealth: nil when the policy leaves bgpHealth.enabled out (on when the CalicoNodeStatus
	// API is served); BGPGrace is bgpHealth.gracePeriod.
	BGPHealth           *bool
	BGPGrace            time.Duration
	Handover            v1alpha1.HandoverMode
	ScaleDownWindow     time.Duration
	MigrateFromNodeMesh bool
	AdoptBGPPeers       bool
	// ReleaseMesh is spec.release.nodeToNodeMesh [Auto]; MaxMeshNodes its maxMeshNodes
	// [DefaultMaxMeshNodes].
	ReleaseMesh  v1alpha1.ReleaseMesh
	MaxMeshNodes int
	// BGPPeer is spec.bgpPeer in Calico's types (BGPPeerSettings): only the session settings are
	// set; every BGPPeer the policy writes carries them.
	BGPPeer apiv3.BGPPeerSpec
	// Going are the signals that a node is going: DefaultGoingSignals, then spec.goingSignals.
	Going []GoingSignal
	// Protect is spec.protectRouteReflectors [true]: route reflectors carry the
	// ProtectionAnnotations.
	Protect bool

	labelKeys []string // see LabelKeys; derived once, in Resolve
}

// Resolve validates p and fills in the defaults. The error list names every invalid field.
func Resolve(p *v1alpha1.RouteReflectorPolicy) (*Resolved, field.ErrorList) {
	if errs := Validate(p); len(errs) > 0 {
		return nil, errs
	}
	s := &p.Spec
	minDef, maxDef, redDef, clientsDef := countDefaults(s)
	r := &Resolved{
		Name:            p.Name,
		Min:             int(deref(s.MinRouteReflectors, minDef)),
		Max:             int(deref(s.MaxRouteReflectors, maxDef)),
		MaxClientsPerRR: int(deref(s.MaxClientsPerRouteReflector, clientsDef)),
		Topology:        topologyOf(s),
		ClusterIDMode:   DefaultClusterIDMode,
		Groups:          DefaultClusterIDGroups,
		Redundancy:      int(redDef),
		MaxRackSize:     DefaultMaxRackSize,
		RRLabelKey:      DefaultRouteReflectorLabelKey,
		ZoneLabel:       or(s.ZoneLabel, DefaultZoneLabel),
		Tolerations:     s.Tolerations,
		RemovalDelay:    DefaultRemovalDelay,
		NotReadyGrace:   DefaultNotReadyGracePeriod,
		Handover:        DefaultHandover,
		ScaleDownWindow: DefaultStabilizationWindow,

		MigrateFromNodeMesh: s.MigrateFromNodeMesh,
		AdoptBGPPeers:       s.AdoptBGPPeers,
		BGPPeer:             BGPPeerSettings(s.BGPPeer),
		ReleaseMesh:         v1alpha1.ReleaseMeshAuto,
		MaxMeshNodes:        DefaultMaxMeshNodes,
		Going:               goingSignalsOf(s.GoingSignals),
		Protect:             s.ProtectRouteReflectors == nil || *s.ProtectRouteReflectors,
	}
	if rel := s.Release; rel != nil {
		r.ReleaseMesh = v1alpha1.ReleaseMesh(or(string(rel.NodeToNodeMesh), string(r.ReleaseMesh)))
		r.MaxMeshNodes = int(deref(rel.MaxMeshNodes, int32(r.MaxMeshNodes)))
	}
	r.NodeSelector = selectorOr(s.NodeSelector, labels.Everything())
	r.Preferred = selectorOr(s.PreferredNodeSelector, labels.Nothing())
	r.Forbidden = selectorOr(s.ForbiddenNodeSelector, labels.Nothing())
	if r.Tolerations == nil {
		r.Tolerations = DefaultTolerations()
	}
	r.Scaling, r.RatioNum, r.RatioDen = ScaleByRatio, 5, 1000
	if sc := s.Scaling; sc != nil {
		switch {
		case sc.Ratio != "":
			rat, _ := new(big.Rat).SetString(sc.Ratio)
			r.RatioNum, r.RatioDen = rat.Num().Int64(), rat.Denom().Int64()
		case len(sc.Steps) > 0:
			r.Scaling, r.Steps = ScaleBySteps, sc.Steps
		case sc.ClientsPerRouteReflector != nil:
			r.Scaling, r.ClientsPerRR = ScaleByClients, int(*sc.ClientsPerRouteReflector)
		}
	}
	base := DefaultClusterID
	if t := s.Topology; t != nil {
		base = or(t.ClusterID, base)
		r.ClusterIDMode = v1alpha1.ClusterIDMode(or(string(t.ClusterIDs), string(r.ClusterIDMode)))
		r.Groups = int(deref(t.ClusterIDGroups, int32(r.Groups)))
		r.Redundancy = int(deref(t.Redundancy, int32(r.Redundancy)))
		r.RackLabel = t.RackLabel
		r.MaxRackSize = int(deref(t.MaxRackSize, int32(r.MaxRackSize)))
	}
	if r.RackLabel == "" {
		r.RackLabel = r.ZoneLabel
	}
	if r.MaxClientsPerRR > 0 && (r.Topology == v1alpha1.DualPlane || r.Topology == v1alpha1.Hierarchical) {
		// A rack's clients are its nodes but its route reflectors.
		r.MaxRackSize = min(r.MaxRackSize, r.MaxClientsPerRR+r.Redundancy)
	}
	r.BaseClusterID = IPv4ToUint(netip.MustParseAddr(base))
	if l := s.RouteReflectorLabel; l != nil {
		r.RRLabelKey = or(l.Key, r.RRLabelKey)
		r.RRLabelValue = l.Value
	}
	if s.RemovalDelay != nil {
		r.RemovalDelay = s.RemovalDelay.Duration
	}
	if s.NotReadyGracePeriod != nil {
		r.NotReadyGrace = s.NotReadyGracePeriod.Duration
	}
	r.BGPGrace = DefaultBGPHealthGracePeriod
	if h := s.BGPHealth; h != nil {
		r.BGPHealth = h.Enabled
		if h.GracePeriod != nil {
			r.BGPGrace = h.GracePeriod.Duration
		}
	}
	r.Handover = v1alpha1.HandoverMode(or(string(s.Handover), string(r.Handover)))
	r.Mode = v1alpha1.Mode(or(string(s.Mode), string(v1alpha1.Enforce)))
	if b := s.Behavior; b != nil && b.ScaleDown != nil && b.ScaleDown.StabilizationWindowSeconds != nil {
		r.ScaleDownWindow = time.Duration(*b.ScaleDown.StabilizationWindowSeconds) * time.Second
	}
	r.labelKeys = r.readLabelKeys()
	return r, nil
}

// LabelKeys returns the node label keys a plan of this policy reads: the keys its node, preferred
// and forbidden selectors name, its route reflector, zone and rack labels, the labels of its going
// signals and the SpotLabels. A change to any other node label cannot change the plan.
func (r *Resolved) LabelKeys() []string { return r.labelKeys }

func (r *Resolved) readLabelKeys() []string {
	keys := []string{r.RRLabelKey, r.ZoneLabel, r.RackLabel}
	for _, g := range r.Going {
		if !g.Taint {
			keys = append(keys, g.Key)
		}
	}
	for _, m := range SpotLabels() {
		keys = append(keys, m.Key)
	}
	for _, s := range []labels.Selector{r.NodeSelector, r.Preferred, r.Forbidden} {
		reqs, _ := s.Requirements()
		for _, q := range reqs {
			keys = append(keys, q.Key())
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// MustResolve resolves a policy known to be valid (the defaults, a test fixture); it panics otherwise.
func MustResolve(p *v1alpha1.RouteReflectorPolicy) *Resolved {
	r, errs := Resolve(p)
	if len(errs) > 0 {
		panic(fmt.Sprintf("policy %q: %v", p.Name, errs.ToAggregate()))
	}
	return r
}

// IsRouteReflectorLabel reports whether labels carry this policy's route reflector label.
func (r *Resolved) IsRouteReflectorLabel(l map[string]string) bool {
	v, ok := l[r.RRLabelKey]
	return ok && v == r.RRLabelValue
}

// ClusterIDString formats a cluster ID.
func ClusterIDString(id uint32) string {
	return netip.AddrFrom4([4]byte{byte(id >> 24), byte(id >> 16), byte(id >> 8), byte(id)}).String()
}

// IPv4ToUint converts an IPv4 address to its 32-bit value.
func IPv4ToUint(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// ParseClusterID parses an IPv4 cluster ID.
func ParseClusterID(s string) (uint32, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		return 0, false
	}
	return IPv4ToUint(a), true
}

func selectorOr(s *metav1.LabelSelector, def labels.Selector) labels.Selector {
	if s == nil {
		return def
	}
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil { // Validate has rejected it already.
		return labels.Nothing()
	}
	return sel
}

func deref(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// DefaultLayoutOf returns r with the default layout (the empty spec's topology, counts and client
// bound) in place of its own, for comparing what a layout costs against the default on the same
// nodes. Everything else (selectors, labels, timing) stays r's.
func DefaultLayoutOf(r *Resolved) *Resolved {
	d := MustResolve(Default(r.Name))
	out := *r
	out.Min, out.Max, out.MaxClientsPerRR = d.Min, d.Max, d.MaxClientsPerRR
	out.Scaling, out.RatioNum, out.RatioDen, out.Steps, out.ClientsPerRR = d.Scaling, d.RatioNum, d.RatioDen, d.Steps, d.ClientsPerRR
	out.Topology, out.ClusterIDMode, out.Groups, out.Redundancy, out.MaxRackSize = d.Topology, d.ClusterIDMode, d.Groups, d.Redundancy, d.MaxRackSize
	return &out
}

// IsDefaultLayout reports whether r plans the default layout.
func (r *Resolved) IsDefaultLayout() bool {
	d := DefaultLayoutOf(r)
	return r.Min == d.Min && r.Max == d.Max && r.MaxClientsPerRR == d.MaxClientsPerRR && r.Topology == d.Topology &&
		r.Redundancy == d.Redundancy && r.MaxRackSize == d.MaxRackSize
}
