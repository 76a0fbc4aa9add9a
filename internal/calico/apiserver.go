package calico

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiregv1 "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset/typed/apiregistration/v1"
)

// APIServiceName is the APIService that registers projectcalico.org/v3 with the API server.
const APIServiceName = "v3.projectcalico.org"

// APIServerServiceAccount is the name of the Calico API server's service account (the Tigera
// operator's and Calico's manifests/apiserver.yaml), in the namespace of its Service.
const APIServerServiceAccount = "calico-apiserver"

// V3Server says who serves projectcalico.org/v3.
type V3Server struct {
	// Aggregated: the Calico API server (an APIService with a Service), which stores each v3
	// object as a crd.projectcalico.org/v1 object under its own identity. Otherwise v3 is served
	// by CRDs or not at all.
	Aggregated bool
	// Service is the APIService's Service as namespace/name, when Aggregated.
	Service string
	// User is the Calico API server's identity when Aggregated: the --calico-apiserver-user
	// flag, else system:serviceaccount:<the Service's namespace>:calico-apiserver.
	User string
}

// DetectV3Server reads the APIService v3.projectcalico.org: with spec.service set, an aggregated
// API server serves projectcalico.org/v3 and user (when not empty) is its identity; no APIService,
// or a local one (CRDs), is not aggregated.
func DetectV3Server(ctx context.Context, c apiregv1.APIServicesGetter, user string) (V3Server, error) {
	as, err := c.APIServices().Get(ctx, APIServiceName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return V3Server{}, nil
	}
	if err != nil {
		return V3Server{}, fmt.Errorf("reading APIService %s: %w", APIServiceName, err)
	}
	svc := as.Spec.Service
	if svc == nil {
		return V3Server{}, nil
	}
	if user == "" {
		user = "system:serviceaccount:" + svc.Namespace + ":" + APIServerServiceAccount
	}
	return V3Server{Aggregated: true, Service: svc.Namespace + "/" + svc.Name, User: user}, nil
}

// String describes the server for logs.
func (s V3Server) String() string {
	if !s.Aggregated {
		return "projectcalico.org/v3 not aggregated (CRDs or not served)"
	}
	return fmt.Sprintf("projectcalico.org/v3 served by the Calico API server (Service %s, user %s)", s.Service, s.User)
}
