// Package policyapply creates and updates the chart's RouteReflectorPolicy after the chart's
// webhooks exist (`policy apply`, the chart's post-install and post-upgrade hook), and keeps a
// policy an earlier chart created as a Helm release resource from being deleted by the upgrade
// that takes it out of the release (`policy keep`, the chart's pre-upgrade hook).
//
// Why a hook and not a release resource: the policy's validating webhook (failurePolicy Fail) is
// created by the same `helm install`. Where the API server has loaded that webhook configuration
// before the policy arrives, the policy's CREATE goes to a Service with no ready endpoint yet and
// the install fails; where it has not, the policy is created unvalidated. The apply waits for the
// webhook instead: it retries, with backoff and within its timeout, while the call does not reach
// an answering webhook (the API server's "failed calling webhook", an unavailable API server), and
// returns a refusal (the webhook's denial, the CRD's validation, RBAC) at once. The policy is then
// reviewed by the webhook like any other.
//
// Running product (the chart's hooks, or by hand): the policy command calls it.
package policyapply

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// FieldManager is the field manager of the apply.
const FieldManager = "calico-rr-autoscaler-policy"

// Helm's annotations: the resource policy that makes Helm leave an object it would delete, and
// the release an object belongs to.
const (
	AnnotationResourcePolicy   = "helm.sh/resource-policy"
	ResourcePolicyKeep         = "keep"
	AnnotationReleaseName      = "meta.helm.sh/release-name"
	AnnotationReleaseNamespace = "meta.helm.sh/release-namespace"
)

var policiesGVR = schema.GroupVersionResource{Group: v1alpha1.GroupVersion.Group, Version: v1alpha1.GroupVersion.Version, Resource: "routereflectorpolicies"}

// Backoff is the wait between two attempts: it starts at Min and doubles up to Max.
type Backoff struct{ Min, Max time.Duration }

// DefaultBackoff is the commands' backoff.
var DefaultBackoff = Backoff{Min: 500 * time.Millisecond, Max: 5 * time.Second}

// Decode checks that doc (YAML or JSON) is one RouteReflectorPolicy with a name and no field the
// API does not have, and returns the apply's body: the document as written, as JSON, with Helm's
// keep annotation added (so that no Helm release ever deletes the policy: its deletion releases
// every route reflector, and only the uninstall hook or a person should do it).
func Decode(doc []byte) ([]byte, string, error) {
	var p v1alpha1.RouteReflectorPolicy
	if err := yaml.UnmarshalStrict(doc, &p); err != nil {
		return nil, "", fmt.Errorf("the policy: %s", oneLine(err))
	}
	if p.APIVersion != v1alpha1.GroupVersion.String() || p.Kind != "RouteReflectorPolicy" || p.Name == "" {
		return nil, "", fmt.Errorf("the policy: %s %s %q is not a named %s RouteReflectorPolicy", p.APIVersion, p.Kind, p.Name, v1alpha1.GroupVersion)
	}
	if p.Namespace != "" {
		return nil, "", fmt.Errorf("the policy: RouteReflectorPolicy %s has a namespace (%s); the resource is cluster-scoped", p.Name, p.Namespace)
	}
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil, "", fmt.Errorf("the policy: %s", oneLine(err))
	}
	var obj map[string]any
	if err := json.Unmarshal(js, &obj); err != nil {
		return nil, "", fmt.Errorf("the policy: %s", oneLine(err))
	}
	meta, _ := obj["metadata"].(map[string]any)
	ann, _ := meta["annotations"].(map[string]any)
	if ann == nil {
		ann = map[string]any{}
	}
	ann[AnnotationResourcePolicy] = ResourcePolicyKeep
	meta["annotations"] = ann
	body, err := json.Marshal(obj)
	if err != nil {
		return nil, "", err
	}
	return body, p.Name, nil
}

// Apply server-side-applies the policy doc (field manager FieldManager, forced: it takes over
// the fields a previous chart's `helm install` wrote) and retries, up to timeout, while the
// request does not reach an answering webhook. A refusal is returned at once. It says on out what
// it did, one line an attempt.
func Apply(ctx context.Context, cfg *rest.Config, doc []byte, timeout time.Duration, b Backoff, out io.Writer) error {
	body, name, err := Decode(doc)
	if err != nil {
		return err
	}
	api, err := client(cfg, out)
	if err != nil {
		return err
	}
	force := true
	what := "RouteReflectorPolicy " + name
	return retry(ctx, timeout, b, out, what, "applied", func(ctx context.Context) (string, error) {
		got, err := api.Patch(ctx, name, types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: FieldManager, Force: &force})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%s applied (uid %s, generation %d)", what, got.GetUID(), got.GetGeneration()), nil
	})
}

// Keep marks the policy name helm.sh/resource-policy: keep when it is a resource of the Helm
// release release in namespace ns (its meta.helm.sh annotations say so) that does not carry the
// mark yet: the chart before 0.3.0 created the policy as a release resource, and `helm upgrade`
// deletes a resource that left the chart unless the live object carries the mark. A policy that
// does not exist, already carries it or is no resource of that release is left as it is. The
// patch changes no spec, so the policy webhook (whose matchCondition skips an UPDATE that keeps
// the spec) is not called: a down controller does not stop the upgrade that would mend it.
func Keep(ctx context.Context, cfg *rest.Config, name, release, ns string, timeout time.Duration, b Backoff, out io.Writer) error {
	api, err := client(cfg, out)
	if err != nil {
		return err
	}
	what := "RouteReflectorPolicy " + name
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, AnnotationResourcePolicy, ResourcePolicyKeep)
	return retry(ctx, timeout, b, out, what, "kept", func(ctx context.Context) (string, error) {
		p, err := api.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return what + " does not exist: nothing to keep", nil
		}
		if err != nil {
			return "", err
		}
		ann := p.GetAnnotations()
		switch {
		case ann[AnnotationResourcePolicy] == ResourcePolicyKeep:
			return what + " already carries " + AnnotationResourcePolicy + ": " + ResourcePolicyKeep, nil
		case ann[AnnotationReleaseName] != release || ann[AnnotationReleaseNamespace] != ns:
			return fmt.Sprintf("%s is no resource of Helm release %s/%s: Helm does not delete it", what, ns, release), nil
		}
		if _, err := api.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
			return "", err
		}
		return fmt.Sprintf("%s marked %s: %s (Helm release %s/%s leaves it when the chart stops rendering it)", what,
			AnnotationResourcePolicy, ResourcePolicyKeep, ns, release), nil
	})
}

// client is the policies' client; the API server's warnings (the policy webhook's) go to out.
func client(cfg *rest.Config, out io.Writer) (dynamic.ResourceInterface, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.WarningHandler = rest.NewWarningWriter(out, rest.WarningWriterOptions{Deduplicate: true})
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to the API server: %w", err)
	}
	return dyn.Resource(policiesGVR), nil
}

// retry runs attempt until it succeeds, fails with an error that is not Retryable, or timeout
// passes; it prints each failed attempt and the success on out.
func retry(ctx context.Context, timeout time.Duration, b Backoff, out io.Writer, what, verb string, attempt func(context.Context) (string, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	wait := b.Min
	for n := 1; ; n++ {
		msg, err := attempt(ctx)
		if err == nil {
			fmt.Fprintln(out, msg)
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s not %s within %v (%d attempts): %s", what, verb, timeout, n, oneLine(err))
		}
		if !Retryable(err) {
			return fmt.Errorf("%s refused: %s", what, oneLine(err))
		}
		fmt.Fprintf(out, "%s not %s yet (attempt %d, next in %v): %s\n", what, verb, n, wait, oneLine(err))
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not %s within %v (%d attempts): %s", what, verb, timeout, n, oneLine(err))
		case <-time.After(wait):
		}
		wait = min(2*wait, b.Max)
	}
}

// Retryable says whether err means the request did not reach an answer yet: the API server could
// not call the webhook (no ready endpoint, the TLS bundle not injected yet: an internal error),
// is unavailable, timed out or throttled, does not serve the resource yet (the CRD being
// established), or could not be reached. A denial (by the webhook, the CRD's schema, RBAC), a
// conflict or a bad request is not.
func Retryable(err error) bool {
	switch {
	case apierrors.IsInternalError(err), apierrors.IsServiceUnavailable(err), apierrors.IsTimeout(err),
		apierrors.IsServerTimeout(err), apierrors.IsTooManyRequests(err), apierrors.IsUnexpectedServerError(err):
		return true
	case apierrors.IsNotFound(err):
		// The resource itself (an apply creates the object; only the type can be missing).
		return true
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return status.Status().Code >= 500
	}
	var ne net.Error
	return errors.As(err, &ne) || utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err)
}

// oneLine is err's message on one line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
