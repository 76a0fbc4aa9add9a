package webhook

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
)

// Rule names why a webhook refuses a request: the first word of the denial's message (in
// brackets, as kubectl prints it), the rule label of the denial metric and the "rules" audit
// annotation of the response. Every denial carries one; nothing reads it back from a message.
type Rule string

// The rules of the node validator; a filter's rule is the filter's own (extender.FilterPlugin.Rule).
const (
	RuleMinRouteReflectors Rule = "min-route-reflectors"
	RuleMaxRouteReflectors Rule = "max-route-reflectors"
	RuleQuorum             Rule = "quorum"
	RuleClusterID          Rule = "cluster-id"
	RuleClusterIDCollision Rule = "cluster-id-collision"
	RuleForbiddenNode      Rule = extender.RuleForbiddenNode
	RuleCordonedNode       Rule = extender.RuleCordonedNode
	RuleNotReadyNode       Rule = extender.RuleNotReadyNode
	RuleDeletingNode       Rule = extender.RuleDeletingNode
	RuleGoingNode          Rule = extender.RuleGoingNode
	RuleUntoleratedTaint   Rule = extender.RuleUntoleratedTaint
	RuleNodeCondition      Rule = extender.RuleNodeCondition
)

// RulePolicyOverlap denies a policy whose nodeSelector overlaps another policy's.
const RulePolicyOverlap Rule = "policy-overlap"

// RuleManagedBGPPeer denies changes to the BGPPeers this product writes.
const RuleManagedBGPPeer Rule = "managed-bgppeer"

// RuleInvalid is the rule of a policy's field validation (policy.Validate).
const RuleInvalid Rule = "invalid"

// Denial is one reason to refuse a request: its rule and the field error kubectl prints.
type Denial struct {
	Rule Rule
	Err  *field.Error
}

// Denials are the reasons to refuse one request.
type Denials []Denial

// deny is a field-level Invalid denial whose message starts with its rule, e.g.
// "[min-route-reflectors] removing the route reflector label from node-7 would leave 2 route
// reflectors; policy "default" requires at least 3".
func deny(path *field.Path, rule Rule, format string, args ...any) Denial {
	return Denial{rule, field.Invalid(path, field.OmitValueType{}, "["+string(rule)+"] "+fmt.Sprintf(format, args...))}
}

// forbid is deny with a Forbidden field error.
func forbid(path *field.Path, rule Rule, format string, args ...any) Denial {
	return Denial{rule, field.Forbidden(path, "["+string(rule)+"] "+fmt.Sprintf(format, args...))}
}

// invalid turns field validation errors into denials under RuleInvalid.
func invalid(errs field.ErrorList) Denials {
	out := make(Denials, len(errs))
	for i, e := range errs {
		out[i] = Denial{RuleInvalid, e}
	}
	return out
}

// errors returns the field errors of the denials.
func (ds Denials) errors() field.ErrorList {
	out := make(field.ErrorList, len(ds))
	for i, d := range ds {
		out[i] = d.Err
	}
	return out
}
