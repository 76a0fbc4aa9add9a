// Package webhook holds the admission webhooks of calico-rr-autoscaler serve and the single
// writer's memory they share with the reconciler.
//
//	/mutate-v1-node                 NodeMutator       Node CREATE, UPDATE (nodes, nodes/status)
//	/validate-v1-node               NodeValidator     Node UPDATE (nodes, nodes/status), DELETE
//	/validate-routereflectorpolicy  PolicyValidator   RouteReflectorPolicy CREATE, UPDATE
//	/validate-bgppeer               BGPPeerValidator  BGPPeer CREATE, UPDATE, DELETE
//
// Serve adapts a Handler to HTTP: a malformed AdmissionReview gets HTTP 400 with a message, a
// panic becomes HTTP 500 (the API server then applies the failurePolicy), never a crash.
//
// Every replica serves every webhook and decides from the shared informer cache (internal/state:
// NodeStore, Policies, Ledger): no API round trip on the hot path. Only decisions that allocate (promotions,
// demotions, cluster IDs) are restricted to the replica holding the leader lease; see docs/architecture.md
// in this directory for the design and why.
package webhook
