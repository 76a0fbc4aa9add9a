package image

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Unpack extracts an image's layers under root as a container runtime would: directories and
// regular files only (this product's image has no other kind), owners and modes from the tar
// headers (chown needs root). Tests use it to run the entrypoint from the image's own files.
func Unpack(img v1.Image, root string) error {
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range layers {
		if err := unpackLayer(l, root); err != nil {
			return err
		}
	}
	return nil
}

// UnpackRoot unpacks img into a fresh container root under a temporary directory the
// unprivileged user 65532 can traverse, and returns the root and what removes it.
func UnpackRoot(img v1.Image) (root string, cleanup func(), err error) {
	tmp, err := os.MkdirTemp("", "rra-rootfs-")
	if err != nil {
		return "", nil, err
	}
	cleanup = func() { _ = os.RemoveAll(tmp) }
	root = filepath.Join(tmp, "root")
	if err = os.Chmod(tmp, 0o755); err == nil {
		if err = os.Mkdir(root, 0o755); err == nil {
			err = Unpack(img, root)
		}
	}
	if err != nil {
		cleanup()
		return "", nil, err
	}
	return root, cleanup, nil
}

func unpackLayer(l v1.Layer, root string) error {
	rc, err := l.Uncompressed()
	if err != nil {
		return err
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Clean("/" + h.Name)
		if strings.Contains(h.Name, "..") {
			return fmt.Errorf("%s: a path out of the root", h.Name)
		}
		dst := filepath.Join(root, filepath.FromSlash(name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: unexpected type %c", h.Name, h.Typeflag)
		}
		if err := os.Lchown(dst, h.Uid, h.Gid); err != nil {
			return err
		}
		mode := os.FileMode(h.Mode & 0o777)
		if h.Mode&0o1000 != 0 {
			mode |= os.ModeSticky
		}
		if err := os.Chmod(dst, mode); err != nil {
			return err
		}
	}
}
