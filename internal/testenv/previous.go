package testenv

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// PreviousRelease is the commit of the last released chart and binary: chart 0.2.0 (appVersion
// 0.2.0), "chart 0.2.0 (appVersion 0.2.0): the CRD gained spec.release and the chart the CRD
// upgrade hook since 0.1.0". The upgrade tests install its chart and run its binary.
const PreviousRelease = "103ce1839b2bf9889528619d78d560f9f27ce734"

// Release is a release's binary and chart, built from its commit.
type Release struct {
	Commit string
	Bin    string // calico-rr-autoscaler, built as the image's entrypoint was at that commit
	Chart  string // charts/calico-rr-autoscaler of the commit
}

// BuildRelease builds the binary and extracts the chart of commit, a commit of this repository's
// history (the clone must have it), into <CacheDir>/releases/<commit>: `git archive` of the commit
// in a scratch directory, `go build -trimpath ./cmd/calico-rr-autoscaler` there with this
// machine's module and build caches, then only the binary and the chart are kept. A second call
// finds them there. The binary is the image's entrypoint as it was then: the full build (the slim
// one came after 0.2.0).
func BuildRelease(ctx context.Context, commit string) (Release, error) {
	root, err := RepoRoot()
	if err != nil {
		return Release{}, err
	}
	full, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "--verify", commit+"^{commit}").Output()
	if err != nil {
		return Release{}, fmt.Errorf("testenv: commit %s is not in this clone's history (a shallow clone?): %v", commit, err)
	}
	commit = strings.TrimSpace(string(full))
	dir := filepath.Join(CacheDir(), "releases", commit)
	r := Release{Commit: commit, Bin: filepath.Join(dir, "calico-rr-autoscaler"), Chart: filepath.Join(dir, "chart", "calico-rr-autoscaler")}
	if checkExecutable(r.Bin) == nil {
		return r, nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return Release{}, err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), commit+".tmp-")
	if err != nil {
		return Release{}, err
	}
	defer os.RemoveAll(tmp)
	src := filepath.Join(tmp, "src")
	if err := gitArchive(ctx, root, commit, src); err != nil {
		return Release{}, err
	}
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", filepath.Join(tmp, "calico-rr-autoscaler"), "./cmd/calico-rr-autoscaler")
	build.Dir = src
	build.Env = append(os.Environ(), "GOFLAGS=-mod=readonly", "GONOSUMDB=github.com/projectcalico", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		return Release{}, fmt.Errorf("testenv: go build at %s: %v\n%s", commit[:7], err, out)
	}
	if err := os.MkdirAll(filepath.Join(tmp, "chart"), 0o755); err != nil {
		return Release{}, err
	}
	if err := os.Rename(filepath.Join(src, "charts", "calico-rr-autoscaler"), filepath.Join(tmp, "chart", "calico-rr-autoscaler")); err != nil {
		return Release{}, err
	}
	if err := os.RemoveAll(src); err != nil {
		return Release{}, err
	}
	if err := os.Rename(tmp, dir); err != nil && checkExecutable(r.Bin) != nil { // another test may have won the race
		return Release{}, err
	}
	return r, nil
}

// gitArchive writes the tree of commit into dir.
func gitArchive(ctx context.Context, root, commit, dir string) error {
	cmd := exec.CommandContext(ctx, "git", "-C", root, "archive", "--format=tar", commit)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	tr := tar.NewReader(out)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			_ = cmd.Wait()
			return fmt.Errorf("testenv: git archive %s: %v %s", commit[:7], err, stderr.String())
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(p, dir+string(filepath.Separator)) {
			continue
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeReg:
			err = writeFile(p, tr, os.FileMode(h.Mode)&0o777)
		case tar.TypeSymlink:
			if err = os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
				err = os.Symlink(h.Linkname, p)
			}
		}
		if err != nil {
			_ = cmd.Wait()
			return err
		}
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("testenv: git archive %s: %v %s", commit[:7], err, stderr.String())
	}
	return nil
}

func writeFile(p string, r io.Reader, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode|0o200)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
