// Package crds finds Calico's CustomResourceDefinitions (libcalico-go/config/crd) in the Go module
// cache, from the github.com/projectcalico/calico module this project depends on, so that tests
// install Calico's own CRDs instead of hand-written ones.
package crds

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
)

// Module and Version are the Calico module the CRDs come from (go.mod's version wins when the
// module is a dependency).
const (
	Module  = "github.com/projectcalico/calico"
	Version = "v0.0.0-20251021213802-b1f3c43f8437"
	subdir  = "libcalico-go/config/crd"
)

var (
	once   sync.Once
	dir    string
	dirErr error
)

// Dir returns the directory of Calico's CRDs: $CALICO_CRDS when set, else the module's directory
// as `go list -m` (or, outside this module, `go mod download`) reports it.
func Dir() (string, error) {
	once.Do(func() { dir, dirErr = find() })
	return dir, dirErr
}

func find() (string, error) {
	if d := os.Getenv("CALICO_CRDS"); d != "" {
		return d, check(d)
	}
	root := moduleRoot()
	var tried []string
	for _, args := range [][]string{
		{"list", "-m", "-json", Module},
		{"mod", "download", "-json", Module + "@" + Version},
	} {
		cmd := exec.Command(goBin(), args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GONOSUMDB=github.com/projectcalico", "GOFLAGS=-mod=readonly")
		var out, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &stderr
		if err := cmd.Run(); err != nil {
			tried = append(tried, fmt.Sprintf("go %v: %v: %s", args, err, bytes.TrimSpace(stderr.Bytes())))
			continue
		}
		var m struct{ Dir string }
		if err := json.Unmarshal(out.Bytes(), &m); err != nil || m.Dir == "" {
			tried = append(tried, fmt.Sprintf("go %v: no module directory (is it downloaded?)", args))
			continue
		}
		d := filepath.Join(m.Dir, subdir)
		if err := check(d); err != nil {
			tried = append(tried, err.Error())
			continue
		}
		return d, nil
	}
	return "", fmt.Errorf("calico CRDs not found (set CALICO_CRDS to a copy of %s/%s): %v", Module, subdir, tried)
}

func check(d string) error {
	if _, err := os.Stat(filepath.Join(d, "crd.projectcalico.org_bgppeers.yaml")); err != nil {
		return fmt.Errorf("%s: no crd.projectcalico.org_bgppeers.yaml: %v", d, err)
	}
	return nil
}

// moduleRoot is this repository's root (where go.mod is), from this file's path; "" (the working
// directory) when the path is not on this machine (a -trimpath build names the file by its
// package path): tests run in their package's directory, inside the module.
func moduleRoot() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok || !filepath.IsAbs(file) {
		return ""
	}
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	if !fileExists(filepath.Join(root, "go.mod")) {
		return ""
	}
	return root
}

func goBin() string {
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
		return p
	}
	return "go"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
