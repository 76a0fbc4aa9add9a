package policy

import (
	"fmt"
	"strings"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	cerrors "github.com/projectcalico/calico/libcalico-go/lib/errors"
	validator "github.com/projectcalico/calico/libcalico-go/lib/validator/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// MaxRestartTimeLimit is the longest maxRestartTime: the restart time of BGP's graceful restart
// capability has 12 bits (RFC 4724), and confd writes the value in whole seconds.
const MaxRestartTimeLimit = 4095 * time.Second

// BGPPeerSettings returns spec.bgpPeer in Calico's types: a BGPPeerSpec with only the settings
// set (password, maxRestartTime, ttlSecurity, filters, sourceAddress, reachableBy); the zero spec
// when the policy has none. The values are copies.
func BGPPeerSettings(s *v1alpha1.BGPPeerSettings) apiv3.BGPPeerSpec {
	if s == nil {
		return apiv3.BGPPeerSpec{}
	}
	s = s.DeepCopy()
	out := apiv3.BGPPeerSpec{
		MaxRestartTime: s.MaxRestartTime,
		TTLSecurity:    s.TTLSecurity,
		SourceAddress:  apiv3.SourceAddress(s.SourceAddress),
		ReachableBy:    s.ReachableBy,
	}
	if len(s.Filters) > 0 {
		out.Filters = s.Filters
	}
	if s.Password != nil {
		out.Password = &apiv3.BGPPassword{SecretKeyRef: s.Password.SecretKeyRef}
	}
	return out
}

// probeSelector stands for the selectors of the BGPPeers a policy writes when its settings are
// validated (every such BGPPeer has a nodeSelector and a peerSelector, never a node or a peerIP).
const probeSelector = "all()"

// validateBGPPeer checks spec.bgpPeer: the Secret reference names a Secret and a key, the
// restart time fits BGP's capability, and Calico's own validator accepts the settings on a
// BGPPeer as the product writes them (by selector), its reasons reported under the field.
func validateBGPPeer(s *v1alpha1.BGPPeerSettings, p *field.Path) field.ErrorList {
	if s == nil {
		return nil
	}
	var errs field.ErrorList
	if pw := s.Password; pw != nil {
		ref := p.Child("password", "secretKeyRef")
		switch {
		case pw.SecretKeyRef == nil:
			errs = append(errs, field.Required(ref, "a password comes from a Secret's key"))
		default:
			if pw.SecretKeyRef.Name == "" {
				errs = append(errs, field.Required(ref.Child("name"), "the Secret's name"))
			}
			for _, msg := range validation.IsDNS1123Subdomain(pw.SecretKeyRef.Name) {
				if pw.SecretKeyRef.Name != "" {
					errs = append(errs, field.Invalid(ref.Child("name"), pw.SecretKeyRef.Name, msg))
				}
			}
			if pw.SecretKeyRef.Key == "" {
				errs = append(errs, field.Required(ref.Child("key"), "the Secret's key that holds the password"))
			}
			for _, msg := range validation.IsConfigMapKey(pw.SecretKeyRef.Key) {
				if pw.SecretKeyRef.Key != "" {
					errs = append(errs, field.Invalid(ref.Child("key"), pw.SecretKeyRef.Key, msg))
				}
			}
		}
	}
	if d := s.MaxRestartTime; d != nil && (d.Duration < 0 || d.Duration > MaxRestartTimeLimit) {
		errs = append(errs, field.Invalid(p.Child("maxRestartTime"), d.Duration.String(),
			"must be between 0s and 4095s (the 12-bit restart time of BGP's graceful restart capability, RFC 4724)"))
	}
	spec := BGPPeerSettings(s)
	spec.NodeSelector, spec.PeerSelector = probeSelector, probeSelector
	obj := &apiv3.BGPPeer{
		TypeMeta:   metav1.TypeMeta{Kind: apiv3.KindBGPPeer, APIVersion: apiv3.GroupVersionCurrent},
		ObjectMeta: metav1.ObjectMeta{Name: "policy-bgppeer-settings"},
		Spec:       spec,
	}
	err := validator.Validate(obj)
	if err == nil {
		return errs
	}
	verr, ok := err.(cerrors.ErrorValidation)
	if !ok {
		return append(errs, field.Invalid(p, "", "Calico's validator: "+err.Error()))
	}
	for _, f := range verr.ErroredFields {
		errs = append(errs, calicoFieldError(p, s, f))
	}
	return errs
}

// calicoFields maps the BGPPeerSpec field names Calico's validator reports to spec.bgpPeer's.
var calicoFields = map[string]string{
	"Password":       "password",
	"MaxRestartTime": "maxRestartTime",
	"TTLSecurity":    "ttlSecurity",
	"Filters":        "filters",
	"SourceAddress":  "sourceAddress",
	"ReachableBy":    "reachableBy",
}

// calicoHints say what Calico's validator wants where it reports only the rule (its tag).
var calicoHints = map[string]string{
	"Filters":       "must name a BGPFilter: lower case alphanumeric characters, '-' or '.'",
	"SourceAddress": "must be UseNodeIP or None",
	"ReachableBy":   "must be an IP address",
}

// calicoFieldError is one of Calico's validation errors as a field error under p: "Filters[1]"
// is p.filters[1]; a field that is not a setting (none should be) is reported on p.
func calicoFieldError(p *field.Path, s *v1alpha1.BGPPeerSettings, f cerrors.ErroredField) *field.Error {
	name, index := f.Name, -1
	if i := strings.IndexByte(name, '['); i > 0 && strings.HasSuffix(name, "]") {
		if _, err := fmt.Sscanf(name[i:], "[%d]", &index); err != nil {
			index = -1
		}
		name = name[:i]
	}
	path, value := p, f.Value
	if child, ok := calicoFields[name]; ok {
		path = p.Child(child)
		if index >= 0 {
			path = path.Index(index)
		}
	}
	// The value as the policy spells it (Calico's struct rules report a reflect.Value).
	switch {
	case name == "Filters" && index >= 0 && index < len(s.Filters):
		value = s.Filters[index]
	case name == "SourceAddress":
		value = string(s.SourceAddress)
	case name == "ReachableBy":
		value = s.ReachableBy
	}
	reason := strings.TrimSpace(strings.TrimPrefix(f.Reason, "Reason: "))
	if name == "ReachableBy" && strings.Contains(reason, "PeerIP is empty") {
		reason += ": the BGPPeers a policy writes select their peers (peerSelector), they have no peerIP"
	}
	if strings.HasPrefix(reason, "failed to validate Field:") {
		hint := calicoHints[name]
		if hint == "" {
			hint = "refused"
		}
		reason = fmt.Sprintf("%s (Calico's validator: %s)", hint, reason)
	} else {
		reason = "Calico's validator: " + reason
	}
	return field.Invalid(path, value, reason)
}
