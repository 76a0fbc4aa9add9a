package bgpverify

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// confdUIDBase is the first user ID of the Follow loop's confds when the Lab runs as root; node i's
// confd runs as confdUIDBase+i. No such user needs to exist.
const confdUIDBase = 1 << 30

// confdUser has cmd, node i's watching confd, run as a user of its own when this process is root.
// Every confd holds an inotify instance (Calico's local BGP peer watcher), and Linux counts them
// per user (fs.inotify.max_user_instances, 128 by default): 30 confds run as root would leave the
// tests beside the Lab (the product's certificate watcher among them) "too many open files". The
// user owns the node's folder and a copy of the kubeconfig; the Lab's folder, the binary and the
// templates are readable by it (shareWithConfdUsers).
func (l *Lab) confdUser(cmd *exec.Cmd, i int, dir string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	uid := confdUIDBase + i
	own := filepath.Join(dir, "kubeconfig")
	if err := copyFile(l.kubeconfig, own, 0o600); err != nil {
		return fmt.Errorf("confd for node %s: %w", l.names[i], err)
	}
	cmd.Env = append(cmd.Env, "KUBECONFIG="+own) // the last of a key wins
	cmd.Env = append(cmd.Env, "HOME="+dir)
	if err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, uid)
	}); err != nil {
		return fmt.Errorf("confd for node %s: %w", l.names[i], err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)},
		Pdeathsig:  syscall.SIGKILL,
	}
	return nil
}

// shareWithConfdUsers (as root) makes what the confd users read reachable: the Lab's folder
// (traversable), the confd binary (linked or copied into it; the tools cache may sit under a
// private home) and the templates, which every node's templates link then points at.
func (l *Lab) shareWithConfdUsers(dirs []string) (confd string, err error) {
	if os.Geteuid() != 0 {
		return l.confd, nil
	}
	if err := os.Chmod(l.dir, 0o711); err != nil {
		return "", err
	}
	confd = filepath.Join(l.dir, "confd")
	if _, err := os.Stat(confd); err != nil {
		if err := os.Link(l.confd, confd); err != nil {
			if err := copyFile(l.confd, confd, 0o755); err != nil {
				return "", err
			}
		}
	}
	templates := filepath.Join(l.dir, "templates")
	if err := os.MkdirAll(templates, 0o755); err != nil {
		return "", err
	}
	src, err := filepath.Glob(filepath.Join(l.etc, "templates", "*"))
	if err != nil {
		return "", err
	}
	for _, s := range src {
		if err := copyFile(s, filepath.Join(templates, filepath.Base(s)), 0o644); err != nil {
			return "", err
		}
	}
	for _, d := range dirs {
		link := filepath.Join(d, "templates")
		if err := os.Remove(link); err != nil && !os.IsNotExist(err) {
			return "", err
		}
		if err := os.Symlink(templates, link); err != nil {
			return "", err
		}
	}
	return confd, nil
}

func copyFile(from, to string, mode os.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chmod(to, mode)
}
