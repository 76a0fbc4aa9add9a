package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of the RouteReflectorPolicy API.
	GroupVersion = schema.GroupVersion{Group: "routereflector.io", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func init() {
	SchemeBuilder.Register(&RouteReflectorPolicy{}, &RouteReflectorPolicyList{})
}

// Ensure the types implement runtime.Object.
var _ runtime.Object = &RouteReflectorPolicy{}
