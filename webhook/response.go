package webhook

import (
	"encoding/json"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Allowed answers yes, with optional warnings (kubectl prints them).
func Allowed(warnings ...string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: true, Warnings: warnings}
}

// Denied answers no with the denials' field errors (a 422 Invalid status whose causes carry the
// field paths, so that kubectl prints each path with its message) and their rules in the "rules"
// audit annotation (the API server records it as <webhook>/rules).
func Denied(gk schema.GroupKind, name string, ds Denials) *admissionv1.AdmissionResponse {
	st := apierrors.NewInvalid(gk, name, ds.errors()).ErrStatus
	rules := make([]string, len(ds))
	for i, d := range ds {
		rules[i] = string(d.Rule)
	}
	return &admissionv1.AdmissionResponse{Allowed: false, Result: &st, AuditAnnotations: map[string]string{auditRules: strings.Join(rules, ",")}}
}

// auditRules is the audit annotation that lists a denial's rules.
const auditRules = "rules"

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

// rulesOf returns the rules of a denial (Denied's audit annotation).
func rulesOf(resp *admissionv1.AdmissionResponse) []string {
	if resp.Allowed {
		return nil
	}
	if r := resp.AuditAnnotations[auditRules]; r != "" {
		return strings.Split(r, ",")
	}
	return []string{string(RuleInvalid)}
}

// statusMessage is the one-line message of a denial, for logs and tests.
func statusMessage(s *metav1.Status) string {
	if s == nil {
		return ""
	}
	return strings.TrimSpace(s.Message)
}
