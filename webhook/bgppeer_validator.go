package webhook

import (
	"context"
	"encoding/json"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// BGPPeerValidator is /validate-bgppeer (CREATE, UPDATE and DELETE of Calico BGPPeers, in either
// API group): only the product's service account may create, change or delete a BGPPeer labelled
// app.kubernetes.io/managed-by=calico-rr-autoscaler (or take that label away), while the policy
// it belongs to exists: one left behind by a deleted policy is the user's to remove.
//
// With the Calico API server (projectcalico.org/v3 aggregated), a v3 request reaches this guard
// from the Calico API server's admission with the requesting user, and the API server then stores
// it as a crd.projectcalico.org/v1 object under its own identity: CalicoAPIServer is that
// identity, allowed to create and update in the crd.projectcalico.org group only (those are v3
// requests this guard already reviewed); not to delete: the Calico API server runs no admission for
// a v3 DELETE, so its deletes are refused like a user's (the product deletes its BGPPeers through
// crd.projectcalico.org itself). Empty when v3 is not aggregated.
type BGPPeerValidator struct {
	ServiceAccount  string
	CalicoAPIServer string
	// Policies, when set, tells whether a BGPPeer's policy still exists; Synced says whether its
	// cache has synced (before, no BGPPeer counts as left behind).
	Policies *state.Policies
	Synced   func() bool
}

// Handle implements Handler.
func (v *BGPPeerValidator) Handle(_ context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
	var objs []*metav1.PartialObjectMetadata
	for _, raw := range []struct {
		b    []byte
		what string
	}{{req.Object.Raw, "request.object"}, {req.OldObject.Raw, "request.oldObject"}} {
		if len(raw.b) == 0 {
			continue
		}
		o := &metav1.PartialObjectMetadata{}
		if err := decodeObject(raw.b, raw.what, o); err != nil {
			return nil, err
		}
		objs = append(objs, o)
	}
	if len(objs) == 0 && req.Operation != admissionv1.Connect {
		return nil, malformedf("request.object and request.oldObject are both missing")
	}
	if req.UserInfo.Username == v.ServiceAccount && v.ServiceAccount != "" {
		return Allowed(), nil
	}
	if req.UserInfo.Username == v.CalicoAPIServer && v.CalicoAPIServer != "" && req.Kind.Group == crdGroup && req.Operation != admissionv1.Delete {
		return Allowed(), nil
	}
	name := req.Name
	for _, o := range objs {
		if name == "" {
			name = o.Name
		}
		labels := peerLabels(o)
		if labels[extender.LabelManagedBy] != extender.ManagedByValue || v.orphan(labels[extender.LabelPolicy]) {
			continue
		}
		verb := map[admissionv1.Operation]string{admissionv1.Create: "created", admissionv1.Delete: "deleted"}[req.Operation]
		if verb == "" {
			verb = "changed"
		}
		path := field.NewPath("metadata", "labels").Key(extender.LabelManagedBy)
		d := forbid(path, RuleManagedBGPPeer, "BGPPeer %s is managed by calico-rr-autoscaler (policy %s) and may be %s only by it; change the RouteReflectorPolicy instead",
			name, quote(labels[extender.LabelPolicy]), verb)
		gk := schema.GroupKind{Group: req.Kind.Group, Kind: req.Kind.Kind}
		if gk.Kind == "" {
			gk.Kind = "BGPPeer"
		}
		return Denied(gk, name, Denials{d}), nil
	}
	return Allowed(), nil
}

// AnnotationCalicoMetadata is where Calico's API server keeps a v3 object's labels (and the rest
// of its metadata) on the crd.projectcalico.org object it stores: that object has no labels.
const AnnotationCalicoMetadata = "projectcalico.org/metadata"

// peerLabels are a BGPPeer's labels: metadata.labels, else (a crd.projectcalico.org object the
// Calico API server stored) the labels in AnnotationCalicoMetadata.
func peerLabels(o *metav1.PartialObjectMetadata) map[string]string {
	if _, ok := o.Labels[extender.LabelManagedBy]; ok {
		return o.Labels
	}
	raw, ok := o.Annotations[AnnotationCalicoMetadata]
	if !ok {
		return o.Labels
	}
	var md struct {
		Labels map[string]string `json:"labels"`
	}
	if err := json.Unmarshal([]byte(raw), &md); err != nil || md.Labels == nil {
		return o.Labels
	}
	return md.Labels
}

// crdGroup is Calico's Kubernetes-datastore group, where the Calico API server stores v3 objects.
const crdGroup = "crd.projectcalico.org"

func quote(s string) string { return `"` + s + `"` }

// orphan reports whether a managed BGPPeer's policy is gone or being deleted.
func (v *BGPPeerValidator) orphan(policyName string) bool {
	if v.Policies == nil || v.Synced == nil || !v.Synced() {
		return false
	}
	obj, ok, err := v.Policies.Store().GetByKey(policyName)
	if err != nil {
		return false
	}
	if !ok {
		return true
	}
	p, ok := obj.(*v1alpha1.RouteReflectorPolicy)
	return ok && p.DeletionTimestamp != nil
}
