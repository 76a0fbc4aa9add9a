// Package crds applies the RouteReflectorPolicy CRD embedded in the binary (policy/crd) to a
// cluster: a server-side apply with the product's field manager and force, so it takes the fields
// over from whoever wrote them before (`helm install` creates the CRD from the chart's crds/ folder,
// which Helm never upgrades), then a wait until the API server has Established the CRD. The
// `crds apply` command runs it, and the chart's pre-upgrade hook runs that command, so `helm upgrade`
// brings the CRD of the new version before anything else of the release changes.
//
// Running product (the chart's pre-upgrade hook, or by hand): the crds apply command calls it.
package crds

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/crd"
)

// FieldManager is the field manager of the apply: the product's name.
const FieldManager = "calico-rr-autoscaler"

// Name is the embedded CRD's name.
const Name = "routereflectorpolicies.routereflector.io"

// Apply server-side-applies the embedded CRD and waits, up to timeout, until it is Established.
// It says on out what it did.
func Apply(ctx context.Context, cfg *rest.Config, timeout time.Duration, out io.Writer) error {
	return apply(ctx, cfg, crd.YAML, timeout, out)
}

// apply is Apply of a CRD document (the tests apply altered copies of the embedded one).
func apply(ctx context.Context, cfg *rest.Config, doc []byte, timeout time.Duration, out io.Writer) error {
	body, name, err := decode(doc)
	if err != nil {
		return err
	}
	cs, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("connecting to the API server: %w", err)
	}
	api := cs.ApiextensionsV1().CustomResourceDefinitions()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	force := true
	got, err := api.Patch(ctx, name, types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: FieldManager, Force: &force})
	if err != nil {
		return fmt.Errorf("applying CustomResourceDefinition %s: %w", name, err)
	}
	fmt.Fprintf(out, "CustomResourceDefinition %s applied (generation %d); waiting until it is Established\n", name, got.Generation)
	var last error
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		cur, err := api.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err
			return false, nil
		}
		last = notEstablished(cur)
		return last == nil, nil
	})
	if err != nil {
		if last == nil {
			last = err
		}
		return fmt.Errorf("CustomResourceDefinition %s not Established after %v: %w", name, timeout, last)
	}
	fmt.Fprintf(out, "CustomResourceDefinition %s Established\n", name)
	return nil
}

// decode checks that doc is one apiextensions.k8s.io/v1 CustomResourceDefinition and returns it
// as JSON, the apply's body (the document as written: no empty fields a typed round trip would
// add), and its name.
func decode(doc []byte) ([]byte, string, error) {
	var c apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(doc, &c); err != nil {
		return nil, "", fmt.Errorf("the embedded CRD: %w", err)
	}
	if c.APIVersion != apiextensionsv1.SchemeGroupVersion.String() || c.Kind != "CustomResourceDefinition" || c.Name == "" {
		return nil, "", fmt.Errorf("the embedded CRD: %s %s %q is not a named %s CustomResourceDefinition", c.APIVersion, c.Kind, c.Name, apiextensionsv1.SchemeGroupVersion)
	}
	body, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil, "", fmt.Errorf("the embedded CRD: %w", err)
	}
	return body, c.Name, nil
}

// notEstablished is nil when the API server serves the CRD's names (Established and
// NamesAccepted), else why not.
func notEstablished(c *apiextensionsv1.CustomResourceDefinition) error {
	var est, names bool
	for _, cond := range c.Status.Conditions {
		switch cond.Type {
		case apiextensionsv1.Established:
			est = cond.Status == apiextensionsv1.ConditionTrue
		case apiextensionsv1.NamesAccepted:
			names = cond.Status == apiextensionsv1.ConditionTrue
			if !names && cond.Message != "" {
				return errors.New("names not accepted: " + cond.Message)
			}
		}
	}
	if !est || !names {
		return fmt.Errorf("Established %v, NamesAccepted %v", est, names)
	}
	return nil
}
