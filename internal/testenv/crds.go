package testenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
)

// InstallCRDs creates (or updates) the CustomResourceDefinitions in the
// given YAML/JSON files and directories (multi-document files; directories
// are walked for *.yaml, *.yml and *.json) and waits until each one is
// Established and served by discovery. Documents of other kinds are skipped.
func InstallCRDs(t testing.TB, cfg *rest.Config, paths ...string) []*apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crds, err := ReadCRDs(paths...)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	if len(crds) == 0 {
		t.Fatalf("testenv: no CustomResourceDefinition found in %v", paths)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := ApplyCRDs(ctx, cfg, crds)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return out
}

// ReadCRDs reads the CustomResourceDefinitions in files and directories.
func ReadCRDs(paths ...string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var files []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		err = filepath.WalkDir(p, func(f string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			switch strings.ToLower(filepath.Ext(f)) {
			case ".yaml", ".yml", ".json":
				if !d.IsDir() {
					files = append(files, f)
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, f := range files {
		got, err := readCRDFile(f)
		if err != nil {
			return nil, err
		}
		crds = append(crds, got...)
	}
	return crds, nil
}

func readCRDFile(path string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	var crds []*apiextensionsv1.CustomResourceDefinition
	r := utilyaml.NewYAMLReader(bufio.NewReader(fh))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return crds, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		var tm metav1.TypeMeta
		if err := utilyaml.Unmarshal(doc, &tm); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if tm.Kind != "CustomResourceDefinition" {
			continue // empty document or another kind
		}
		if tm.APIVersion != apiextensionsv1.SchemeGroupVersion.String() {
			return nil, fmt.Errorf("%s: CustomResourceDefinition of apiVersion %q, want %s", path, tm.APIVersion, apiextensionsv1.SchemeGroupVersion)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := utilyaml.Unmarshal(doc, crd); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		crds = append(crds, crd)
	}
}

// ApplyCRDs creates or updates CRDs and waits until they are Established
// and served.
func ApplyCRDs(ctx context.Context, cfg *rest.Config, crds []*apiextensionsv1.CustomResourceDefinition) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	cs, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	api := cs.ApiextensionsV1().CustomResourceDefinitions()
	for _, crd := range crds {
		crd = crd.DeepCopy()
		crd.ResourceVersion = ""
		_, err := api.Create(ctx, crd, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
				cur, err := api.Get(ctx, crd.Name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				crd.ResourceVersion = cur.ResourceVersion
				_, err = api.Update(ctx, crd, metav1.UpdateOptions{})
				return err
			})
		}
		if err != nil {
			return nil, fmt.Errorf("applying CRD %s: %w", crd.Name, err)
		}
	}

	disco, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	out := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(crds))
	for _, want := range crds {
		var got *apiextensionsv1.CustomResourceDefinition
		err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			cur, err := api.Get(ctx, want.Name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			got = cur
			return crdCondition(cur, apiextensionsv1.Established) && crdCondition(cur, apiextensionsv1.NamesAccepted), nil
		})
		if err != nil {
			return nil, fmt.Errorf("CRD %s not Established: %w (conditions %v)", want.Name, err, conditions(got))
		}
		for _, v := range got.Spec.Versions {
			if !v.Served {
				continue
			}
			gv := got.Spec.Group + "/" + v.Name
			err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
				rl, err := disco.ServerResourcesForGroupVersion(gv)
				if err != nil {
					return false, nil
				}
				for _, r := range rl.APIResources {
					if r.Name == got.Spec.Names.Plural {
						return true, nil
					}
				}
				return false, nil
			})
			if err != nil {
				return nil, fmt.Errorf("CRD %s: %s %s not served: %w", want.Name, gv, got.Spec.Names.Plural, err)
			}
		}
		out = append(out, got)
	}
	return out, nil
}

func crdCondition(crd *apiextensionsv1.CustomResourceDefinition, t apiextensionsv1.CustomResourceDefinitionConditionType) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == t {
			return c.Status == apiextensionsv1.ConditionTrue
		}
	}
	return false
}

func conditions(crd *apiextensionsv1.CustomResourceDefinition) []string {
	if crd == nil {
		return nil
	}
	var out []string
	for _, c := range crd.Status.Conditions {
		out = append(out, fmt.Sprintf("%s=%s(%s)", c.Type, c.Status, c.Message))
	}
	return out
}
