package webhook

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

var peerKind = metav1.GroupVersionKind{Group: "crd.projectcalico.org", Version: "v1", Kind: "BGPPeer"}

func peer(name string, managed bool) *metav1.PartialObjectMetadata {
	p := &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "crd.projectcalico.org/v1", Kind: "BGPPeer"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}},
	}
	if managed {
		p.Labels[extender.LabelManagedBy] = extender.ManagedByValue
		p.Labels[extender.LabelPolicy] = "default"
	}
	return p
}

// calicoAPI is the Calico API server's service account (the Tigera operator's).
var calicoAPI = authenticationv1.UserInfo{Username: "system:serviceaccount:calico-apiserver:calico-apiserver"}

func TestBGPPeerValidator(t *testing.T) {
	unmanaged := func(p *metav1.PartialObjectMetadata) *metav1.PartialObjectMetadata {
		p = p.DeepCopy()
		delete(p.Labels, extender.LabelManagedBy)
		return p
	}
	m := peer("rr-autoscaler-mesh-default", true)
	// stored: m as Calico's API server stores it in crd.projectcalico.org (labels in an annotation).
	stored := m.DeepCopy()
	stored.Labels = nil
	stored.Annotations = map[string]string{AnnotationCalicoMetadata: `{"creationTimestamp":"2026-01-01T00:00:00Z","labels":{"app.kubernetes.io/managed-by":"calico-rr-autoscaler","routereflector.io/policy":"default"}}`}
	const denied = `metadata.labels[app.kubernetes.io/managed-by]: Forbidden: [managed-bgppeer] BGPPeer rr-autoscaler-mesh-default is managed by calico-rr-autoscaler (policy "default") and may be %s only by it; change the RouteReflectorPolicy instead`
	tests := []struct {
		name     string
		op       admissionv1.Operation
		user     authenticationv1.UserInfo
		obj, old runtime.Object
		want     string
		// v3: the request is in projectcalico.org/v3; calicoAPIServer: the aggregated API server's identity.
		v3              bool
		calicoAPIServer string
	}{
		{"update by hand", admissionv1.Update, alice, m, m, fmt.Sprintf(denied, "changed"), false, calicoAPI.Username},
		{"delete by hand", admissionv1.Delete, alice, nil, m, fmt.Sprintf(denied, "deleted"), false, ""},
		{"create by hand", admissionv1.Create, alice, m, nil, fmt.Sprintf(denied, "created"), false, ""},
		{"label taken away", admissionv1.Update, alice, unmanaged(m), m, fmt.Sprintf(denied, "changed"), false, ""},
		{"kubelets are not exempt", admissionv1.Update, kubelet, m, m, fmt.Sprintf(denied, "changed"), false, ""},
		{"the product may", admissionv1.Update, sa, m, m, "", false, ""},
		{"unmanaged peer", admissionv1.Update, alice, peer("mine", false), peer("mine", false), "", false, ""},
		{"update by hand through v3", admissionv1.Update, alice, m, m, fmt.Sprintf(denied, "changed"), true, calicoAPI.Username},
		{"the Calico API server stores a reviewed v3 write", admissionv1.Update, calicoAPI, m, m, "", false, calicoAPI.Username},
		{"the Calico API server's delete: no v3 admission reviewed it", admissionv1.Delete, calicoAPI, nil, stored, fmt.Sprintf(denied, "deleted"), false, calicoAPI.Username},
		{"the Calico API server's identity is a user like any through v3", admissionv1.Update, calicoAPI, m, m, fmt.Sprintf(denied, "changed"), true, calicoAPI.Username},
		{"update by hand through the CRD of a v3-stored peer", admissionv1.Update, alice, stored, stored, fmt.Sprintf(denied, "changed"), false, calicoAPI.Username},
		{"delete by hand through the CRD of a v3-stored peer", admissionv1.Delete, alice, nil, stored, fmt.Sprintf(denied, "deleted"), false, calicoAPI.Username},
		{"the Calico API server stores a v3-stored peer", admissionv1.Update, calicoAPI, stored, stored, "", false, calicoAPI.Username},
		{"no aggregated v3: the same identity is a user like any", admissionv1.Update, calicoAPI, m, m, fmt.Sprintf(denied, "changed"), false, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, []*v1alpha1.RouteReflectorPolicy{mkPolicy("default", nil)}, nil)
			var obj, old runtime.Object
			if tc.obj != nil {
				obj = tc.obj
			}
			if tc.old != nil {
				old = tc.old
			}
			f.peerVal.CalicoAPIServer = tc.calicoAPIServer
			kind := peerKind
			if tc.v3 {
				kind = metav1.GroupVersionKind{Group: "projectcalico.org", Version: "v3", Kind: "BGPPeer"}
			}
			req := request(t, tc.op, kind, "", tc.user, obj, old)
			for _, o := range []runtime.Object{tc.obj, tc.old} {
				if m, ok := o.(*metav1.PartialObjectMetadata); ok {
					req.Name = m.Name // as the API server names the object of the request
				}
			}
			resp, err := f.peerVal.Handle(context.Background(), req)
			require.NoError(t, err)
			got := causes(resp)
			require.Equal(t, tc.want, got, "causes (allowed=%v)", resp.Allowed)
			require.Equal(t, tc.want == "", resp.Allowed, "allowed; causes:\n%s", got)
		})
	}
}

// TestBGPPeerValidatorLeftBehind: a managed BGPPeer whose policy is gone or being deleted is the
// user's to remove; before the cache has synced, none counts as left behind.
func TestBGPPeerValidatorLeftBehind(t *testing.T) {
	deleting := mkPolicy("default", nil)
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	deleting.Finalizers = []string{"routereflector.io/cleanup"}
	m := peer("rr-autoscaler-mesh-default", true)
	// stored: m as Calico's API server stores it in crd.projectcalico.org (labels in an annotation).
	stored := m.DeepCopy()
	stored.Labels = nil
	stored.Annotations = map[string]string{AnnotationCalicoMetadata: `{"creationTimestamp":"2026-01-01T00:00:00Z","labels":{"app.kubernetes.io/managed-by":"calico-rr-autoscaler","routereflector.io/policy":"default"}}`}
	for _, tc := range []struct {
		name     string
		policies []*v1alpha1.RouteReflectorPolicy
		synced   bool
		allowed  bool
	}{
		{"its policy exists", []*v1alpha1.RouteReflectorPolicy{mkPolicy("default", nil)}, true, false},
		{"its policy is gone", nil, true, true},
		{"its policy is being deleted", []*v1alpha1.RouteReflectorPolicy{deleting}, true, true},
		{"cache not synced yet", nil, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.policies, nil)
			f.peerVal.Synced = func() bool { return tc.synced }
			req := request(t, admissionv1.Delete, peerKind, "", alice, nil, m)
			req.Name = m.Name
			resp, err := f.peerVal.Handle(context.Background(), req)
			require.NoError(t, err)
			require.Equal(t, tc.allowed, resp.Allowed, "allowed; causes: %s", causes(resp))
		})
	}
}
