package policyapply

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// TestDecode: the apply's body is the document with the keep annotation added (the user's
// annotations kept); a document that is not one named cluster-scoped RouteReflectorPolicy, or has
// a field the API lacks, is one line naming what is wrong.
func TestDecode(t *testing.T) {
	body, name, err := Decode([]byte("apiVersion: routereflector.io/v1alpha1\nkind: RouteReflectorPolicy\n" +
		"metadata: {name: default, annotations: {team: net}}\nspec: {topology: {type: DualPlane}}\n"))
	require.NoError(t, err)
	require.Equal(t, "default", name)
	require.JSONEq(t, `{"apiVersion":"routereflector.io/v1alpha1","kind":"RouteReflectorPolicy",
		"metadata":{"name":"default","annotations":{"team":"net","helm.sh/resource-policy":"keep"}},"spec":{"topology":{"type":"DualPlane"}}}`, string(body))

	for doc, want := range map[string]string{
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n":                                                        "is not a named routereflector.io/v1alpha1 RouteReflectorPolicy",
		"apiVersion: routereflector.io/v1alpha1\nkind: RouteReflectorPolicy\nmetadata: {}\n":                            "is not a named",
		"apiVersion: routereflector.io/v1alpha1\nkind: RouteReflectorPolicy\nmetadata: {name: a}\nspec: {topolgy: 1}\n": `unknown field "topolgy"`,
		"apiVersion: routereflector.io/v1alpha1\nkind: RouteReflectorPolicy\nmetadata: {name: a, namespace: b}\n":       "cluster-scoped",
		"{": "the policy:",
	} {
		_, _, err := Decode([]byte(doc))
		require.ErrorContains(t, err, want, doc)
		require.NotContains(t, err.Error(), "\n", doc)
	}
}

// TestRetryable: what means "no answer yet" is retried; a denial, a conflict or bad input is not.
func TestRetryable(t *testing.T) {
	gr := schema.GroupResource{Group: "routereflector.io", Resource: "routereflectorpolicies"}
	retry := map[string]error{
		"webhook unreachable": apierrors.NewInternalError(errors.New(`failed calling webhook "policy.validate.routereflector.io": no endpoints available`)),
		"unavailable":         apierrors.NewServiceUnavailable("starting"),
		"timeout":             apierrors.NewTimeoutError("slow", 1),
		"throttled":           apierrors.NewTooManyRequests("later", 1),
		"type not served yet": apierrors.NewNotFound(gr, ""),
		"connection refused":  fmt.Errorf("dial: %w", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}),
	}
	for what, err := range retry {
		require.True(t, Retryable(err), what)
	}
	refuse := map[string]error{
		"webhook denial": apierrors.NewInvalid(schema.GroupKind{Group: "routereflector.io", Kind: "RouteReflectorPolicy"}, "default",
			field.ErrorList{field.Invalid(field.NewPath("spec", "minRouteReflectors"), 5, "too many")}),
		"forbidden":   apierrors.NewForbidden(gr, "default", errors.New("no")),
		"conflict":    apierrors.NewConflict(gr, "default", errors.New("changed")),
		"bad request": apierrors.NewBadRequest("bad"),
		"plain":       errors.New("something else"),
	}
	for what, err := range refuse {
		require.False(t, Retryable(err), what)
	}
	require.Equal(t, "a b c", oneLine(errors.New("a\n b\tc")))
	require.False(t, strings.Contains(oneLine(errors.New("x\ny")), "\n"))
}
