// Package policy turns a RouteReflectorPolicy into the resolved settings the planner uses:
// defaults, validation (pure functions returning field.ErrorList) and warnings for risky values.
// It never talks to a cluster: the webhooks, the reconciler and the plan command all call it.
package policy
