// Package v1alpha1 holds the RouteReflectorPolicy API (group routereflector.io).
//
// +kubebuilder:object:generate=true
// +groupName=routereflector.io
package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TopologyType names a route reflector layout.
// +kubebuilder:validation:Enum=DualPlane;SingleCluster;MultiCluster;Hierarchical
type TopologyType string

const (
	// DualPlane (the default): every zone is split into racks of at most maxRackSize nodes; each rack
	// has `redundancy` route reflectors (one cluster ID per rack), one in each plane; a spine of one
	// route reflector per plane (sharing the first cluster ID, spread over the zones) links the
	// racks. A rack route reflector peers with its rack and with its plane's spine member. Every
	// client stores `redundancy` paths per prefix, at any size, and keeps its routes when a zone,
	// a spine member or a rack route reflector is lost.
	DualPlane TopologyType = "DualPlane"
	// SingleCluster: each zone is its own RR cluster with its own cluster ID; clients peer with every RR of their zone.
	SingleCluster TopologyType = "SingleCluster"
	// MultiCluster: RRs balanced across zones in a few cluster-ID groups; each client peers with `redundancy` RRs.
	MultiCluster TopologyType = "MultiCluster"
	// Hierarchical: rack RRs (one cluster ID per rack) under a spine of RRs sharing one cluster ID.
	Hierarchical TopologyType = "Hierarchical"
)

// ClusterIDMode says how MultiCluster hands out cluster IDs.
// +kubebuilder:validation:Enum=Grouped;PerRouteReflector
type ClusterIDMode string

const (
	// Grouped: every RR belongs to one of clusterIDGroups groups and carries its group's cluster ID.
	Grouped ClusterIDMode = "Grouped"
	// PerRouteReflector: each RR carries its own cluster ID (the design's original layout).
	PerRouteReflector ClusterIDMode = "PerRouteReflector"
)

// HandoverMode says when an obsolete route reflector may lose its role.
// +kubebuilder:validation:Enum=Delay;BGPSessions
type HandoverMode string

const (
	// HandoverDelay waits removalDelay after the replacement is in place.
	HandoverDelay HandoverMode = "Delay"
	// HandoverBGPSessions waits until the replacement reports Established sessions (removalDelay is the timeout).
	HandoverBGPSessions HandoverMode = "BGPSessions"
)

// Mode says whether the product acts on a policy.
// +kubebuilder:validation:Enum=Enforce;Observe;Paused
type Mode string

const (
	// Enforce: the webhooks and the reconciler apply the plan and refuse what breaks it.
	Enforce Mode = "Enforce"
	// Observe: the plan is computed and reported (status, Events, metrics, admission warnings);
	// nothing is written to nodes or BGPPeers and nothing is refused.
	Observe Mode = "Observe"
	// Paused: no role changes and no BGPPeer writes; manual changes that break the policy's limits
	// are still refused.
	Paused Mode = "Paused"
)

// RouteReflectorPolicy says how many Calico route reflectors a set of nodes gets, in which topology, and how roles are handed over.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=rrp
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.status.mode`
// +kubebuilder:printcolumn:name="Topology",type=string,JSONPath=`.spec.topology.type`
// +kubebuilder:printcolumn:name="Nodes",type=integer,JSONPath=`.status.nodes`
// +kubebuilder:printcolumn:name="Healthy",type=integer,JSONPath=`.status.healthyNodes`
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.status.desiredRouteReflectors`
// +kubebuilder:printcolumn:name="RRs",type=integer,JSONPath=`.status.routeReflectors`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type RouteReflectorPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   RouteReflectorPolicySpec   `json:"spec,omitempty"`
	Status RouteReflectorPolicyStatus `json:"status,omitempty"`
}

// RouteReflectorPolicyList is a list of RouteReflectorPolicy.
//
// +kubebuilder:object:root=true
type RouteReflectorPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RouteReflectorPolicy `json:"items"`
}

// RouteReflectorPolicySpec is the desired route reflector layout. Every field is optional.
type RouteReflectorPolicySpec struct {
	// Mode is Enforce, Observe or Paused [Enforce]. Observe computes and reports the plan and what
	// Enforce would change or refuse, and writes nothing; Paused keeps everything as it is but still
	// refuses manual changes that break the policy. Back to Enforce, the plan is applied through
	// the normal handover.
	// +optional
	Mode Mode `json:"mode,omitempty"`

	// NodeSelector selects the nodes this policy manages [all nodes]. A node may match at most one policy.
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`

	// MinRouteReflectors is the lowest number of route reflectors [3; 2 in DualPlane].
	// +optional
	// +kubebuilder:validation:Minimum=1
	MinRouteReflectors *int32 `json:"minRouteReflectors,omitempty"`

	// MaxRouteReflectors is the highest number of route reflectors [25; no cap in DualPlane, whose
	// count follows from the racks].
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxRouteReflectors *int32 `json:"maxRouteReflectors,omitempty"`

	// MaxClientsPerRouteReflector bounds the clients of every route reflector [500 in DualPlane;
	// no bound in the other topologies]. DualPlane keeps its racks small enough; MultiCluster adds
	// route reflectors (up to maxRouteReflectors); Hierarchical splits racks; a plan that cannot
	// keep the bound is Degraded.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxClientsPerRouteReflector *int32 `json:"maxClientsPerRouteReflector,omitempty"`

	// Scaling says how the desired count follows the node count [ratio "0.005"].
	// +optional
	Scaling *Scaling `json:"scaling,omitempty"`

	// Topology is the route reflector layout [DualPlane].
	// +optional
	Topology *Topology `json:"topology,omitempty"`

	// RouteReflectorLabel is the node label that marks a route reflector [calico-route-reflector=""].
	// +optional
	RouteReflectorLabel *Label `json:"routeReflectorLabel,omitempty"`

	// ZoneLabel is the node label that names a node's zone [topology.kubernetes.io/zone]. A node without it is in zone "".
	// +optional
	ZoneLabel string `json:"zoneLabel,omitempty"`

	// PreferredNodeSelector selects nodes that are picked first.
	// +optional
	PreferredNodeSelector *metav1.LabelSelector `json:"preferredNodeSelector,omitempty"`

	// ForbiddenNodeSelector selects nodes that never become route reflectors.
	// +optional
	ForbiddenNodeSelector *metav1.LabelSelector `json:"forbiddenNodeSelector,omitempty"`

	// Tolerations are the route reflector's tolerations [tolerate everything, as calico-node does].
	// A node with a NoSchedule or NoExecute taint that these do not tolerate is not eligible.
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// NotReadyGracePeriod is how long a route reflector keeps its role while NotReady [2m]: a kubelet
	// blip shorter than this moves no role (every role change resets the BGP sessions of all the
	// route reflector's clients). Cordon and deletion act at once.
	// +optional
	NotReadyGracePeriod *metav1.Duration `json:"notReadyGracePeriod,omitempty"`

	// BGPHealth judges route reflectors by their BGP sessions too: one whose Node is Ready but
	// whose BGP sessions are down (its BIRD died) for gracePeriod is replaced as a NotReady one is.
	// +optional
	BGPHealth *BGPHealth `json:"bgpHealth,omitempty"`

	// RemovalDelay is how long an obsolete route reflector keeps its role after its replacement is in place [5m].
	// +optional
	RemovalDelay *metav1.Duration `json:"removalDelay,omitempty"`

	// Handover says what an obsolete route reflector waits for before it loses its role [Delay].
	// +optional
	Handover HandoverMode `json:"handover,omitempty"`

	// Behavior tunes scaling down.
	// +optional
	Behavior *Behavior `json:"behavior,omitempty"`

	// MigrateFromNodeMesh turns Calico's node-to-node mesh off once every client has its route reflector sessions.
	// +optional
	MigrateFromNodeMesh bool `json:"migrateFromNodeMesh,omitempty"`

	// AdoptBGPPeers lets the product delete hand-written BGPPeers (those it did not write) once its
	// own BGPPeers cover every session they make, after the handover wait. Without it, and in Observe
	// or Paused mode, hand-written BGPPeers are never touched.
	// +optional
	AdoptBGPPeers bool `json:"adoptBGPPeers,omitempty"`

	// BGPPeer holds the session settings every BGPPeer the policy writes carries (Calico's
	// BGPPeer fields of the same names and types). A change updates the BGPPeers in place.
	// +optional
	BGPPeer *BGPPeerSettings `json:"bgpPeer,omitempty"`

	// GoingSignals are more taints and labels that mean a node is about to go (drained, deleted,
	// reclaimed), besides the built-in ones: cluster-autoscaler's ToBeDeletedByClusterAutoscaler
	// taint, Karpenter's karpenter.sh/disrupted taint and karpenter.sh/disruption=disrupting
	// (taint or label), node.kubernetes.io/out-of-service, a deletion held by a finalizer and the
	// kubelet's graceful node shutdown. A route reflector that carries one hands its role over at
	// once, as a cordoned one does; a node that carries one is not made a route reflector.
	// +optional
	GoingSignals *GoingSignals `json:"goingSignals,omitempty"`

	// ProtectRouteReflectors [true] puts karpenter.sh/do-not-disrupt: "true" and
	// cluster-autoscaler.kubernetes.io/scale-down-disabled: "true" on every route reflector while
	// it is one, so that the autoscalers leave it out of their voluntary disruptions
	// (consolidation, scale-down), and removes them after its demotion (only those the product
	// set: see docs/autoscalers.md). false: the product sets none and removes those it set.
	// +optional
	ProtectRouteReflectors *bool `json:"protectRouteReflectors,omitempty"`

	// Release says what deleting the policy (or uninstalling the chart) does to the layout when
	// the policy turned the node-to-node mesh off [mesh back on up to 100 nodes, layout kept
	// above].
	// +optional
	Release *Release `json:"release,omitempty"`
}

// GoingSignals are taints and labels that mean a node is going.
type GoingSignals struct {
	// Taints: a node with a taint of this key (and value, when one is given; any effect) is going.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Taints []NodeMark `json:"taints,omitempty"`
	// Labels: a node with a label of this key (and value, when one is given) is going.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Labels []NodeMark `json:"labels,omitempty"`
}

// NodeMark matches a taint or a label by key, and by value when Value is set.
type NodeMark struct {
	// Key is the taint's or label's key.
	Key string `json:"key"`
	// Value, when set, must equal the taint's or label's value; empty matches any value.
	// +optional
	Value string `json:"value,omitempty"`
}

// ReleaseMesh says whether deleting a policy that turned the node-to-node mesh off turns it back on.
// +kubebuilder:validation:Enum=Auto;Restore;Keep
type ReleaseMesh string

const (
	// ReleaseMeshAuto: the mesh comes back when the cluster has at most maxMeshNodes nodes;
	// above, the layout is kept and released from the product's ownership.
	ReleaseMeshAuto ReleaseMesh = "Auto"
	// ReleaseMeshRestore: the mesh comes back at any size (every node then holds a session with
	// every other node).
	ReleaseMeshRestore ReleaseMesh = "Restore"
	// ReleaseMeshKeep: the mesh never comes back: the layout (roles, labels, BGPPeers) stays,
	// released from the product's ownership.
	ReleaseMeshKeep ReleaseMesh = "Keep"
)

// Release tunes what deleting the policy does.
type Release struct {
	// NodeToNodeMesh is Auto, Restore or Keep [Auto]: whether deleting a policy that turned
	// Calico's node-to-node mesh off (migrateFromNodeMesh) turns it back on, or keeps the
	// route reflectors, their labels and BGPPeers in place, released from the product.
	// +optional
	NodeToNodeMesh ReleaseMesh `json:"nodeToNodeMesh,omitempty"`

	// MaxMeshNodes is the largest cluster (all its nodes) on which Auto turns the mesh back on
	// [100, the size beyond which Calico recommends route reflectors]. Only with Auto.
	// +optional
	// +kubebuilder:validation:Minimum=2
	MaxMeshNodes *int32 `json:"maxMeshNodes,omitempty"`
}

// BGPPeerSettings are Calico BGPPeer fields (projectcalico.org/v3 BGPPeerSpec) that the product
// copies onto every BGPPeer it writes for the policy. Each has Calico's meaning and type.
type BGPPeerSettings struct {
	// Password is the BGP password (TCP MD5) of every session, from a key of a Secret in
	// calico-node's namespace (its NAMESPACE: calico-system with the Tigera operator, kube-system
	// with Calico's manifests), which calico-node must be allowed to get, list and watch.
	// +optional
	Password *BGPPassword `json:"password,omitempty"`

	// MaxRestartTime is the graceful restart time BIRD announces on every session [BIRD's 120s].
	// +optional
	MaxRestartTime *metav1.Duration `json:"maxRestartTime,omitempty"`

	// TTLSecurity turns on the generalized TTL security mechanism (GTSM, RFC 5082) with this many
	// hops between the peers [off].
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=255
	TTLSecurity *uint8 `json:"ttlSecurity,omitempty"`

	// Filters are the names of Calico BGPFilters applied, in order, on every session.
	// +optional
	// +listType=atomic
	Filters []string `json:"filters,omitempty"`

	// SourceAddress is UseNodeIP (the node's IP is the session's source address; Calico's
	// default) or None.
	// +optional
	SourceAddress SourceAddress `json:"sourceAddress,omitempty"`

	// ReachableBy is the gateway address through which the peer is reached (Calico adds a /32
	// static route to the peer). Calico allows it only on BGPPeers with a peerIP, and the product's
	// BGPPeers select their peers: the policy webhook refuses it, with Calico's reason.
	// +optional
	ReachableBy string `json:"reachableBy,omitempty"`
}

// SourceAddress is Calico's BGPPeer sourceAddress.
// +kubebuilder:validation:Enum=UseNodeIP;None
type SourceAddress string

// The source addresses.
const (
	SourceAddressUseNodeIP SourceAddress = "UseNodeIP"
	SourceAddressNone      SourceAddress = "None"
)

// BGPPassword is Calico's BGPPassword: where a BGP password comes from.
type BGPPassword struct {
	// SecretKeyRef selects a key of a Secret in calico-node's namespace.
	// +optional
	SecretKeyRef *corev1.SecretKeySelector `json:"secretKeyRef,omitempty"`
}

// Scaling sets the desired count. At most one field may be set.
type Scaling struct {
	// Ratio is a decimal in (0,1]: desired = ceil(healthy nodes x ratio).
	// +optional
	// +kubebuilder:validation:Pattern=`^[0-9]*\.?[0-9]+$`
	Ratio string `json:"ratio,omitempty"`

	// Steps maps node counts to route reflector counts; maxNodes strictly increasing.
	// +optional
	// +listType=atomic
	Steps []Step `json:"steps,omitempty"`

	// ClientsPerRouteReflector: desired = ceil(clients / N).
	// +optional
	// +kubebuilder:validation:Minimum=1
	ClientsPerRouteReflector *int32 `json:"clientsPerRouteReflector,omitempty"`
}

// Step is one row of a stepping table: up to maxNodes healthy nodes get routeReflectors route reflectors.
type Step struct {
	// MaxNodes is the largest healthy node count of this step.
	// +kubebuilder:validation:Minimum=1
	MaxNodes int32 `json:"maxNodes"`
	// RouteReflectors is the route reflector count of this step.
	// +kubebuilder:validation:Minimum=1
	RouteReflectors int32 `json:"routeReflectors"`
}

// Topology is the layout of route reflectors and their cluster IDs.
type Topology struct {
	// Type is DualPlane, SingleCluster, MultiCluster or Hierarchical [DualPlane].
	// +optional
	Type TopologyType `json:"type,omitempty"`

	// ClusterID is the first cluster ID; the others count up from it [224.0.0.1].
	// +optional
	ClusterID string `json:"clusterID,omitempty"`

	// ClusterIDs says how MultiCluster hands out cluster IDs [Grouped].
	// +optional
	ClusterIDs ClusterIDMode `json:"clusterIDs,omitempty"`

	// ClusterIDGroups is the number of cluster-ID groups in Grouped mode [3].
	// +optional
	// +kubebuilder:validation:Minimum=1
	ClusterIDGroups *int32 `json:"clusterIDGroups,omitempty"`

	// Redundancy is the number of route reflectors each client peers with [2 in DualPlane (its planes),
	// 3 otherwise].
	// +optional
	// +kubebuilder:validation:Minimum=1
	Redundancy *int32 `json:"redundancy,omitempty"`

	// RackLabel names a node's rack in Hierarchical [the zone label]. DualPlane forms its racks itself.
	// +optional
	RackLabel string `json:"rackLabel,omitempty"`

	// MaxRackSize is the largest rack in Hierarchical and DualPlane [500; in DualPlane at most
	// maxClientsPerRouteReflector plus the rack's route reflectors]. Hierarchical splits bigger racks
	// and nodes without a rack; DualPlane splits a zone into more racks when it outgrows them and
	// merges racks only when the zone has shrunk by a margin (a tenth of a rack), so a cluster that
	// hovers at a boundary does not move roles.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxRackSize *int32 `json:"maxRackSize,omitempty"`
}

// Label is a label key and value.
type Label struct {
	// Key is the label key.
	// +optional
	Key string `json:"key,omitempty"`
	// Value is the label value ("" allowed).
	// +optional
	Value string `json:"value,omitempty"`
}

// BGPHealth: the leader keeps one Calico CalicoNodeStatus (class BGP) per route reflector and
// reads the sessions calico-node reports there. A route reflector whose Node is Ready but with no
// Established BGP session (with its clients, nor any other peer) for gracePeriod is treated as
// failed: its replacement is promoted and it drains; it takes its role back once its sessions
// have been Established for the scale-down stabilization window (at most gracePeriod).
type BGPHealth struct {
	// Enabled [true when Calico's CalicoNodeStatus API is served, false otherwise].
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// GracePeriod is how long a route reflector's sessions may stay down before it is replaced [2m].
	// +optional
	GracePeriod *metav1.Duration `json:"gracePeriod,omitempty"`
}

// Behavior tunes scaling, as the HorizontalPodAutoscaler's behavior does.
type Behavior struct {
	// ScaleDown tunes scaling down.
	// +optional
	ScaleDown *ScaleDown `json:"scaleDown,omitempty"`
}

// ScaleDown tunes scaling down.
type ScaleDown struct {
	// StabilizationWindowSeconds: the desired count used for scaling down is the highest seen in this window [300].
	// +optional
	// +kubebuilder:validation:Minimum=0
	StabilizationWindowSeconds *int32 `json:"stabilizationWindowSeconds,omitempty"`
}

// RouteReflectorPolicyStatus is what the reconciler last observed and did.
type RouteReflectorPolicyStatus struct {
	// ObservedGeneration is the generation of the spec the status is for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Mode is the mode the reconciler last acted in.
	// +optional
	Mode Mode `json:"mode,omitempty"`
	// PendingChanges lists what Enforce would change now (Observe and Paused), at most 20:
	// "promote node-12 (zone-b)", "demote node-3", ...
	// +optional
	// +listType=atomic
	PendingChanges []string `json:"pendingChanges,omitempty"`
	// Nodes is the number of nodes the policy manages.
	// +optional
	Nodes int32 `json:"nodes,omitempty"`
	// HealthyNodes is the number of Ready nodes not being deleted.
	// +optional
	HealthyNodes int32 `json:"healthyNodes,omitempty"`
	// DesiredRouteReflectors is the planned number of route reflectors.
	// +optional
	DesiredRouteReflectors int32 `json:"desiredRouteReflectors,omitempty"`
	// RouteReflectors is the number of nodes that carry the route reflector role.
	// +optional
	RouteReflectors int32 `json:"routeReflectors,omitempty"`
	// Zones holds per-zone counts.
	// +optional
	// +listType=map
	// +listMapKey=zone
	Zones []ZoneStatus `json:"zones,omitempty"`
	// Conditions: Ready, Degraded, ExpensiveTopology.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// LastScaleTime is when the route reflector count last changed.
	// +optional
	LastScaleTime *metav1.Time `json:"lastScaleTime,omitempty"`
	// Routes is what the plan costs BIRD, by the graph model: paths stored per prefix on the busiest
	// and on the mean node, for this policy's layout and for the default layout on the same nodes.
	// +optional
	Routes *RouteCost `json:"routes,omitempty"`
	// Transitions are the moves in flight whose BGP sessions a later move waits for (a cluster ID
	// changed, a route reflector promoted or given clients, a release step): each is written here
	// before the move it records, so that a new leader resumes every wait where it stood. Dropped
	// once settled (at most its maxWait after it started) or when its node is gone. The mesh
	// migration's and the adopt step's waits (MeshOff, Adopt) are here too, dropped by their step.
	// +optional
	// +listType=map
	// +listMapKey=kind
	// +listMapKey=node
	Transitions []Transition `json:"transitions,omitempty"`
	// SessionReportsSeen is when the product first read a CalicoNodeStatus report calico-node
	// filled in for this policy (a transition's awaited sessions, or BGP health's). From then on
	// calico-node is known to report, and a transition's wait ends only with a fresh report
	// showing its sessions Established, or at its maxWait; before, a wait with no fresh report by
	// its settleWait goes on as without reports (calico-node before 3.22 leaves them empty).
	// +optional
	SessionReportsSeen *metav1.Time `json:"sessionReportsSeen,omitempty"`
}

// Transition is one move in flight: a route reflector whose BGP sessions (re)started, and how long
// the moves that rely on them wait.
type Transition struct {
	// Kind is what started it: Renumber (a route reflector keeping its role changed its cluster
	// ID), SessionsRestart (promoted or renumbered: every session restarts), ClientMove and
	// UplinkMove (a transitional set gave it clients or rack route reflectors), SetInherited (a
	// transitional set whose start no record held), ReleaseStep (a deleted policy's release
	// released it); or a step's wait: MeshOff (the node-to-node mesh goes off once every client has
	// had its route reflectors, the layout unchanged, long enough), Adopt (a hand-written BGPPeer
	// goes once the product's plan has covered its nodes long enough); or the session verifier's:
	// Sessions (a node whose sessions with its peers a wait reads; Established once one report showed
	// every one of them up); or BGP health's: BGPDown (a route reflector seen with no Established
	// session since StartedAt: its grace period counts from then, and MaxWait is
	// bgpPeer.maxRestartTime, how long its clients' BIRDs hold the routes learnt over it).
	Kind string `json:"kind"`
	// Node is the route reflector whose sessions the moves wait for; for a step's wait, what it
	// waits on, with an '@' no node name has: MeshOff the layout (layout@ and its fingerprint, a
	// changed layout is another record), Adopt the BGPPeer as name@resourceVersion (a changed
	// BGPPeer is another record), Sessions the node and a fingerprint of the peers awaited
	// (name@ and the hash: other peers are another record).
	Node string `json:"node"`
	// StartedAt is when its sessions (re)started.
	StartedAt metav1.MicroTime `json:"startedAt"`
	// MinWait: nothing relying on it goes sooner, and a CalicoNodeStatus report counts only when
	// made at least this long after StartedAt.
	MinWait metav1.Duration `json:"minWait"`
	// SettleWait is the wait when no CalicoNodeStatus can tell (handover other than BGPSessions).
	SettleWait metav1.Duration `json:"settleWait"`
	// MaxWait: the moves relying on it go at the latest this long after StartedAt.
	MaxWait metav1.Duration `json:"maxWait"`
	// Sessions is what the CalicoNodeStatus reports read since said: Reported (a fresh report,
	// some session not Established), Established (every awaited session Established), Settled (no
	// session awaited, no report read), or empty.
	// +optional
	Sessions string `json:"sessions,omitempty"`
	// Alive: BGP health saw a session of its role Established since StartedAt.
	// +optional
	Alive bool `json:"alive,omitempty"`
	// Pending: written before its move, which the leader has not yet confirmed made. A new leader
	// finding it does not know when (or whether) the move went, and starts the wait again from
	// when it read it.
	// +optional
	Pending bool `json:"pending,omitempty"`
	// Orphaning (BGPDown) names clients of the route reflector (sorted, the first ten) whose
	// every route reflector was down with it: it was failed without bgpHealth.gracePeriod, and the
	// peering sets it is in keep it until MaxWait after StartedAt, whatever replaced it.
	// +optional
	// +kubebuilder:validation:MaxItems=10
	Orphaning []string `json:"orphaning,omitempty"`
	// UpSince (BGPDown): when its sessions were seen Established again after it failed; it counts
	// healthy once they have stayed so for the policy's scale-down stabilization window (at most
	// bgpHealth.gracePeriod).
	// +optional
	UpSince *metav1.MicroTime `json:"upSince,omitempty"`
	// Failed (BGPDown): judged failed, its replacement promoted, and announced so
	// (RouteReflectorBGPDown); RouteReflectorBGPUp announces its return.
	// +optional
	Failed bool `json:"failed,omitempty"`
}

// RouteCost is the graph model's figures for a plan. Paths per prefix are decimals ("2.0"): the
// routes a node stores divided by the number of nodes (every node originates one block).
type RouteCost struct {
	// BusiestPathsPerPrefix is the busiest node's paths per prefix.
	BusiestPathsPerPrefix string `json:"busiestPathsPerPrefix"`
	// MeanPathsPerPrefix is the mean node's paths per prefix.
	MeanPathsPerPrefix string `json:"meanPathsPerPrefix"`
	// DefaultBusiestPathsPerPrefix is the busiest node's paths per prefix under the default layout.
	DefaultBusiestPathsPerPrefix string `json:"defaultBusiestPathsPerPrefix"`
	// DefaultMeanPathsPerPrefix is the mean node's paths per prefix under the default layout.
	DefaultMeanPathsPerPrefix string `json:"defaultMeanPathsPerPrefix"`
	// MissingPairs counts node pairs where a node does not learn the other's block.
	MissingPairs int64 `json:"missingPairs"`
	// DrillsRun counts the failure drills run on the plan: each zone lost, each route reflector
	// lost (a drill that stands for a class of route reflectors counts once per member).
	// +optional
	DrillsRun int `json:"drillsRun,omitempty"`
	// FailedDrills are the failure drills that lose routes, with the node pairs each loses.
	// +optional
	FailedDrills []FailedDrill `json:"failedDrills,omitempty"`
	// Families (when a node of the policy has an IPv6 address) are the same figures in each
	// address family its nodes peer in, on the sessions both of whose ends have an address of the
	// family (Calico's bird.cfg and bird6.cfg); the drills then run in each family. The figures
	// above stay the family-blind ones (every node peering as the BGPPeers say).
	// +optional
	// +listType=map
	// +listMapKey=family
	Families []FamilyRouteCost `json:"families,omitempty"`
}

// FamilyRouteCost is the graph model's figures for a plan in one address family.
type FamilyRouteCost struct {
	// Family is IPv4 or IPv6.
	Family string `json:"family"`
	// Nodes counts the policy's nodes with an address of the family.
	Nodes int `json:"nodes"`
	// BusiestPathsPerPrefix is the busiest node's paths per prefix in the family.
	BusiestPathsPerPrefix string `json:"busiestPathsPerPrefix"`
	// MeanPathsPerPrefix is the mean node's paths per prefix in the family.
	MeanPathsPerPrefix string `json:"meanPathsPerPrefix"`
	// MissingPairs counts the node pairs of the family where a node does not learn the other's
	// block.
	MissingPairs int64 `json:"missingPairs"`
}

// FailedDrill is a failure drill that loses routes.
type FailedDrill struct {
	// Kind is zone or routeReflector.
	Kind string `json:"kind"`
	// Name is the zone's or the route reflector's.
	Name string `json:"name"`
	// MissingPairs counts the surviving node pairs that no longer learn each other's routes.
	MissingPairs int64 `json:"missingPairs"`
	// Family is the address family the drill lost routes in (IPv4, IPv6) when the policy's nodes
	// have IPv6 addresses; empty for an IPv4-only policy's family-blind drills.
	// +optional
	Family string `json:"family,omitempty"`
}

// ZoneStatus holds the counts of one zone.
type ZoneStatus struct {
	// Zone is the zone name ("" for nodes without a zone label).
	Zone string `json:"zone"`
	// Nodes is the number of managed nodes in the zone.
	// +optional
	Nodes int32 `json:"nodes,omitempty"`
	// DesiredRouteReflectors is the planned number of route reflectors in the zone.
	// +optional
	DesiredRouteReflectors int32 `json:"desiredRouteReflectors,omitempty"`
	// RouteReflectors is the number of route reflectors in the zone.
	// +optional
	RouteReflectors int32 `json:"routeReflectors,omitempty"`
}
