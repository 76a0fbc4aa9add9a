package extender

// ModelDrills is set by model_hook_test.go (package extender_test, which may import the graph
// model: internal/bgpmodel imports this package). It runs the graph model on a plan with every
// node up and, when drills is set, after the loss of each zone and of each route reflector (a
// sample of them beyond 5,000 nodes), and returns what it found missing.
var ModelDrills func(in Input, res *Result, drills bool) []string

// CheckInvariants exports checkInvariants to the external tests.
var CheckInvariants = checkInvariants
