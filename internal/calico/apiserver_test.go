package calico

import (
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggfake "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset/fake"
)

func TestDetectV3Server(t *testing.T) {
	aggregated := &apiregv1.APIService{ObjectMeta: metav1.ObjectMeta{Name: APIServiceName},
		Spec: apiregv1.APIServiceSpec{Group: "projectcalico.org", Version: "v3",
			Service: &apiregv1.ServiceReference{Namespace: "calico-system", Name: "calico-api"}}}
	local := &apiregv1.APIService{ObjectMeta: metav1.ObjectMeta{Name: APIServiceName},
		Spec: apiregv1.APIServiceSpec{Group: "projectcalico.org", Version: "v3"}}
	for _, tc := range []struct {
		name string
		objs []runtime.Object
		user string
		want V3Server
	}{
		{"no APIService", nil, "", V3Server{}},
		{"local APIService (CRDs)", []runtime.Object{local}, "", V3Server{}},
		{"aggregated, user from the Service's namespace", []runtime.Object{aggregated}, "",
			V3Server{Aggregated: true, Service: "calico-system/calico-api", User: "system:serviceaccount:calico-system:calico-apiserver"}},
		{"aggregated, user from the flag", []runtime.Object{aggregated}, "system:serviceaccount:x:y",
			V3Server{Aggregated: true, Service: "calico-system/calico-api", User: "system:serviceaccount:x:y"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := aggfake.NewSimpleClientset(tc.objs...)
			got, err := DetectV3Server(t.Context(), c.ApiregistrationV1(), tc.user)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}
