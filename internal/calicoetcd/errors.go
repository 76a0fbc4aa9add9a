//go:build !slim

package calicoetcd

import (
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	cerrors "github.com/projectcalico/calico/libcalico-go/lib/errors"
)

// kubeError turns Calico's client errors into the Kubernetes API errors the reconciler already
// handles (not found, already exists, conflict); others pass unchanged.
func kubeError(err error, resource, name string) error {
	gr := schema.GroupResource{Group: "projectcalico.org", Resource: resource}
	switch {
	case err == nil:
		return nil
	case errors.As(err, new(cerrors.ErrorResourceDoesNotExist)):
		return apierrors.NewNotFound(gr, name)
	case errors.As(err, new(cerrors.ErrorResourceAlreadyExists)):
		return apierrors.NewAlreadyExists(gr, name)
	case errors.As(err, new(cerrors.ErrorResourceUpdateConflict)):
		return apierrors.NewConflict(gr, name, err)
	}
	return err
}
