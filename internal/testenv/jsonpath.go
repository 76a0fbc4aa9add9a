package testenv

import (
	"bytes"
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/jsonpath"
)

// JSONPath reads one object as the admin through the API and prints template as `kubectl get -o
// jsonpath=<template>` does (a missing key prints nothing). For polls: a kubectl process costs
// about a third of a CPU second to start and discover the API, which a test polling every 100 ms
// takes from the tests beside it; what a user sees of kubectl (its errors, warnings and output)
// stays with Kubectl.
func (e *Env) JSONPath(ctx context.Context, gvr schema.GroupVersionResource, namespace, name, template string) (string, error) {
	e.mu.Lock()
	if e.dyn == nil {
		d, err := dynamic.NewForConfig(e.Config)
		if err != nil {
			e.mu.Unlock()
			return "", err
		}
		e.dyn = d
	}
	dyn := e.dyn
	e.mu.Unlock()
	obj, err := dyn.Resource(gvr).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	j := jsonpath.New("out")
	j.AllowMissingKeys(true)
	if err := j.Parse(template); err != nil {
		return "", err
	}
	var out bytes.Buffer
	if err := j.Execute(&out, obj.Object); err != nil {
		return "", err
	}
	return out.String(), nil
}
