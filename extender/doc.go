// Package extender is the route reflector scheduling pipeline: filter plugins decide which managed
// nodes may be route reflectors, score plugins rank them, and the topology planners select the
// route reflectors, give them cluster IDs, assign each client its route reflectors and derive the
// Calico BGPPeers that wire the plan.
//
// Plan is a pure function of (nodes, policy, current state read from the nodes, now): it never
// talks to a cluster, never reads a clock and never depends on map order, so the webhooks, the
// reconciler and the plan command all get the same answer for the same cluster state.
package extender
