//go:build !linux

package bgpverify

import "os/exec"

// confdUser: outside Linux the confds run as this process's user.
func (l *Lab) confdUser(*exec.Cmd, int, string) error { return nil }

// shareWithConfdUsers: outside Linux there are no confd users.
func (l *Lab) shareWithConfdUsers([]string) (string, error) { return l.confd, nil }
