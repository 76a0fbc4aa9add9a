package webhook

import (
	"context"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
)

// RuleManagedBGPPeer denies changes to the BGPPeers this product writes.
const RuleManagedBGPPeer = "managed-bgppeer"

// BGPPeerValidator is /validate-bgppeer (CREATE, UPDATE and DELETE of Calico BGPPeers, in either
// API group): only the product's service account may create, change or delete a BGPPeer labelled
// app.kubernetes.io/managed-by=calico-rr-autoscaler (or take that label away).
type BGPPeerValidator struct {
	ServiceAccount string
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
	name := req.Name
	for _, o := range objs {
		if name == "" {
			name = o.Name
		}
		if o.Labels[extender.LabelManagedBy] != extender.ManagedByValue {
			continue
		}
		verb := map[admissionv1.Operation]string{admissionv1.Create: "created", admissionv1.Delete: "deleted"}[req.Operation]
		if verb == "" {
			verb = "changed"
		}
		path := field.NewPath("metadata", "labels").Key(extender.LabelManagedBy)
		err := field.Forbidden(path, "["+RuleManagedBGPPeer+"] BGPPeer "+name+" is managed by calico-rr-autoscaler (policy "+
			quote(o.Labels[extender.LabelPolicy])+") and may be "+verb+" only by it; change the RouteReflectorPolicy instead")
		gk := schema.GroupKind{Group: req.Kind.Group, Kind: req.Kind.Kind}
		if gk.Kind == "" {
			gk.Kind = "BGPPeer"
		}
		return Denied(gk, name, field.ErrorList{err}), nil
	}
	return Allowed(), nil
}

func quote(s string) string { return `"` + s + `"` }
