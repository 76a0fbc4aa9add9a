package extender

// ModelDrills is set by model_hook_test.go (package extender_test, which may import the graph
// model: internal/bgpmodel imports this package). It runs the graph model on a plan with every
// node up and, when drills is set, its failure drills (each zone lost, each route reflector lost;
// one per class of route reflectors beyond bgpmodel.ExactDrillNodes), and returns what it found
// missing.
var ModelDrills func(in Input, res *Result, drills bool) []string

// PlanDrills is bgpmodel.PlanDrills, set by model_hook_test.go for the tests of this package.
var PlanDrills DrillFunc

// CheckInvariants exports checkInvariants to the external tests.
var CheckInvariants = checkInvariants

// ModelTransition is set by model_hook_test.go: it compares the cluster as prev left it (in's
// nodes, prev's BGPPeers) with the plan r on the graph model (bgpmodel.NewTransition) and returns
// a problem when a node pair between two nodes that keep their role is at risk while r is applied.
var ModelTransition func(in Input, prev, r *Result) []string
