package testenv

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
)

// APIService registers an aggregated API server listening on 127.0.0.1:port.
type APIService struct {
	Group, Version string
	// Namespace and Service name the Service of the APIService, as a cluster has it: the API
	// server reaches the backend as <Service>.<Namespace>.svc, the name its certificate must
	// carry (WriteServingCert).
	Namespace, Service string
	Port               int
	// CABundle is the PEM CA of the backend's serving certificate.
	CABundle []byte
}

// RegisterAPIService makes the API server proxy a.Group/a.Version to a backend on loopback and
// waits until the APIService is Available. There is no kube-proxy nor endpoint controller here,
// and Endpoints may not hold a loopback address: the Service is an ExternalName Service for
// localhost, which kube-apiserver (without --enable-aggregator-routing) dials at the APIService's
// port, with TLS to <Service>.<Namespace>.svc.
func (e *Env) RegisterAPIService(t testing.TB, a APIService) {
	t.Helper()
	ctx := t.Context()
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: a.Namespace}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("testenv: creating namespace %s: %v", a.Namespace, err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: a.Namespace, Name: a.Service},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost"},
	}
	if _, err := cs.CoreV1().Services(a.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("testenv: creating Service %s/%s: %v", a.Namespace, a.Service, err)
	}
	agg, err := aggclient.NewForConfig(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	port := int32(a.Port)
	as := &apiregv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: a.Version + "." + a.Group},
		Spec: apiregv1.APIServiceSpec{
			Group: a.Group, Version: a.Version, GroupPriorityMinimum: 1500, VersionPriority: 200,
			Service:  &apiregv1.ServiceReference{Namespace: a.Namespace, Name: a.Service, Port: &port},
			CABundle: a.CABundle,
		},
	}
	if _, err := agg.ApiregistrationV1().APIServices().Create(ctx, as, metav1.CreateOptions{}); err != nil {
		t.Fatalf("testenv: creating APIService %s: %v", as.Name, err)
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := agg.ApiregistrationV1().APIServices().Get(ctx, as.Name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiregv1.Available {
				last = string(c.Status) + " " + c.Reason + ": " + c.Message
				return c.Status == apiregv1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("testenv: APIService %s on 127.0.0.1:%s not Available: %v (last: %s)", as.Name, strconv.Itoa(a.Port), err, last)
	}
	t.Logf("testenv: APIService %s available (%s)", as.Name, fmt.Sprintf("%s/%s -> 127.0.0.1:%d", a.Namespace, a.Service, a.Port))
}
