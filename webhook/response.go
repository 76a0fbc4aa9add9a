package webhook

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Allowed answers yes, with optional warnings (kubectl prints them).
func Allowed(warnings ...string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: true, Warnings: warnings}
}

// Denied answers no with field errors: a 422 Invalid status whose causes carry the field paths, so
// that kubectl prints each path with its message.
func Denied(gk schema.GroupKind, name string, errs field.ErrorList) *admissionv1.AdmissionResponse {
	st := apierrors.NewInvalid(gk, name, errs).ErrStatus
	return &admissionv1.AdmissionResponse{Allowed: false, Result: &st}
}

// Patched answers yes with a JSON patch (none when ops is empty).
func Patched(ops []PatchOp, warnings ...string) (*admissionv1.AdmissionResponse, error) {
	resp := Allowed(warnings...)
	if len(ops) == 0 {
		return resp, nil
	}
	b, err := json.Marshal(ops)
	if err != nil {
		return nil, err
	}
	pt := admissionv1.PatchTypeJSONPatch
	resp.Patch, resp.PatchType = b, &pt
	return resp, nil
}

// RuleError is a field-level Invalid error whose message starts with the rule that denies it, e.g.
// "[min-route-reflectors] removing the route reflector label from node-7 would leave 2 route
// reflectors; policy "default" requires at least 3".
func RuleError(path *field.Path, rule, format string, args ...any) *field.Error {
	return field.Invalid(path, field.OmitValueType{}, "["+rule+"] "+fmt.Sprintf(format, args...))
}

var ruleRE = regexp.MustCompile(`\[([a-z0-9-]+)\]`)

// rulesOf returns the rules named in a denial's causes.
func rulesOf(resp *admissionv1.AdmissionResponse) []string {
	if resp.Allowed || resp.Result == nil {
		return nil
	}
	var msgs []string
	if d := resp.Result.Details; d != nil {
		for _, c := range d.Causes {
			msgs = append(msgs, c.Message)
		}
	}
	if len(msgs) == 0 {
		msgs = []string{resp.Result.Message}
	}
	var rules []string
	for _, m := range msgs {
		if r := ruleRE.FindStringSubmatch(m); r != nil {
			rules = append(rules, r[1])
		} else {
			rules = append(rules, "invalid")
		}
	}
	return rules
}

// statusMessage is the one-line message of a denial, for logs and tests.
func statusMessage(s *metav1.Status) string {
	if s == nil {
		return ""
	}
	return strings.TrimSpace(s.Message)
}
