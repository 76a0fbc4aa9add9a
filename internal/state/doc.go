// Package state is what the webhooks and the reconciler share, the single writer's view of the
// cluster: the informer-backed stores of nodes (NodeStore, stripped by LabelKeys.Strip to the labels the product reads) and policies
// (Policies, with Partition, Overlaps and OutsideSelector), and the Ledger: the assume overlay of
// changes admitted or written but not in the cache yet, and each policy's AdmitState for the
// mutating webhook's incremental decisions (see webhook/doc.go for the design). The webhook
// handlers, the reconciler and serve's wiring call it; it calls the planner (extender) only.
package state
