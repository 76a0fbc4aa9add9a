// Package uninstall takes the product's work back before it is removed: it deletes every
// RouteReflectorPolicy and waits until the running controller has released each one (its
// finalizer: the node mesh turned back on where a policy turned it off, then the route reflectors,
// clients and BGPPeers released). The `uninstall` command runs it, and the Helm chart's pre-delete
// hook runs that command, so `helm uninstall` leaves no route reflector role behind.
//
// Running product (its last act): the uninstall command calls it.
package uninstall

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/policy/v1alpha1"
)

// Run deletes every RouteReflectorPolicy and waits, up to timeout, until all are gone. It says on
// out what it does and which policies are left when it gives up.
func Run(ctx context.Context, cfg *rest.Config, timeout time.Duration, out io.Writer) error {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("connecting to the API server: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	list := &v1alpha1.RouteReflectorPolicyList{}
	if err := c.List(ctx, list); err != nil {
		return fmt.Errorf("listing RouteReflectorPolicies: %w", err)
	}
	for i := range list.Items {
		p := &list.Items[i]
		if err := c.Delete(ctx, p); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting RouteReflectorPolicy %s: %w", p.Name, err)
		}
		fmt.Fprintf(out, "RouteReflectorPolicy %s deleted; waiting for the controller to release its route reflectors\n", p.Name)
	}
	for {
		left := &v1alpha1.RouteReflectorPolicyList{}
		if err := c.List(ctx, left); err != nil {
			if ctx.Err() != nil {
				break
			}
			return fmt.Errorf("listing RouteReflectorPolicies: %w", err)
		}
		if len(left.Items) == 0 {
			fmt.Fprintln(out, "every RouteReflectorPolicy released")
			return nil
		}
		select {
		case <-ctx.Done():
			var names []string
			for _, p := range left.Items {
				names = append(names, p.Name)
			}
			slices.Sort(names)
			return fmt.Errorf("after %s, RouteReflectorPolicies %v are still being released (kubectl describe rrp shows why); run uninstall again, or remove their finalizer %s to leave their route reflectors in place", timeout, names, "routereflector.io/cleanup")
		case <-time.After(time.Second):
		}
	}
	return ctx.Err()
}
