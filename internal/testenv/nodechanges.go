package testenv

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// NodeChange is a node's value (of the watch's key) changing from one non-empty value to another,
// when the test's watch saw it.
type NodeChange struct {
	Node, From, To string
	At             time.Time
}

// NodeChanges records the changes WatchNodeChanges sees.
type NodeChanges struct {
	mu  sync.Mutex
	seq []NodeChange
}

// All is every change seen so far, in the order seen.
func (c *NodeChanges) All() []NodeChange {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.seq)
}

// WatchNodes calls seen, from one goroutine, with each Node a watch of the Nodes delivers (added
// or modified) from now until the test ends, the version the watch had before (nil for a node new
// to it) and when it arrived. seen must not fail the test (it may run after the test's own
// goroutine has returned).
func WatchNodes(t testing.TB, kube kubernetes.Interface, seen func(prev, cur *corev1.Node, at time.Time)) {
	t.Helper()
	list, err := kube.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	prev := map[string]*corev1.Node{}
	for i := range list.Items {
		prev[list.Items[i].Name] = &list.Items[i]
	}
	wi, err := kube.CoreV1().Nodes().Watch(t.Context(), metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	require.NoError(t, err)
	t.Cleanup(wi.Stop)
	go func() {
		for ev := range wi.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			seen(prev[n.Name], n, time.Now())
			prev[n.Name] = n
		}
	}()
}

// WatchNodeChanges records, from now until the test ends, every change of key(node) from one
// non-empty value to another (an empty value is no value: the change to it and back is none). The
// renumbering of a route reflector that keeps its role is key = its cluster ID while it is an
// active route reflector.
func WatchNodeChanges(t testing.TB, kube kubernetes.Interface, key func(*corev1.Node) string) *NodeChanges {
	t.Helper()
	c := &NodeChanges{}
	WatchNodes(t, kube, func(prev, cur *corev1.Node, at time.Time) {
		if prev == nil {
			return
		}
		if from, to := key(prev), key(cur); from != "" && to != "" && from != to {
			c.mu.Lock()
			c.seq = append(c.seq, NodeChange{Node: cur.Name, From: from, To: to, At: at})
			c.mu.Unlock()
		}
	})
	return c
}

// Spacing describes each change of seq, when it came after from and after the change before it
// (with mark(before, it) appended), and lists the changes that came less than least after the one
// before.
func Spacing(seq []NodeChange, from time.Time, least time.Duration, mark func(before, c NodeChange) string) (lines, short []string) {
	for i, c := range seq {
		line := fmt.Sprintf("%s %s->%s @%v", c.Node, c.From, c.To, c.At.Sub(from).Round(10*time.Millisecond))
		if i > 0 {
			gap := c.At.Sub(seq[i-1].At)
			line += fmt.Sprintf(", %v after the last%s", gap.Round(10*time.Millisecond), mark(seq[i-1], c))
			if gap < least {
				short = append(short, line)
			}
		}
		lines = append(lines, line)
	}
	return lines, short
}
