package bgpverify

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	corev1 "k8s.io/api/core/v1"
)

// RenderEtcd has Calico's confd render every node's BIRD configuration from Calico's etcd
// datastore itself (DATASTORE_TYPE=etcdv3; etcdEnv gives ETCD_ENDPOINTS and, if any, the
// ETCD_*_FILE settings; read only) into dir, and returns where the sessions confd configured
// differ from the graph model's for the same state: nodes (in the Kubernetes datastore's shape,
// with their real BGP addresses, see calicoetcd.KubernetesShape), peers and configs as read from
// that etcd. It runs no BIRD (the pod blocks of an etcd datastore live in its IPAM, which a
// verification does not touch).
func RenderEtcd(ctx context.Context, confd string, etcdEnv []string, nodes []*corev1.Node, peers []apiv3.BGPPeer, configs []apiv3.BGPConfiguration, dir string) ([]string, error) {
	st, err := objectState(nodes, peers, configs)
	if err != nil {
		return nil, err
	}
	// confd reads the nodes' own addresses from etcd: the model's sessions are matched on those,
	// not on the addresses assign gives a scratch API server.
	sorted := slices.Clone(nodes)
	slices.SortFunc(sorted, func(a, b *corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	for i, n := range sorted {
		a := n.Annotations[annotationIPv4Address]
		p, err := netip.ParsePrefix(a)
		if err != nil {
			return nil, InputError{fmt.Errorf("node %s: BGP IPv4 address %q is not an address with its prefix length", n.Name, a)}
		}
		st.addrs[i] = p
	}
	etc, err := confdEtc()
	if err != nil {
		return nil, err
	}
	names := make([]string, len(st.nodes))
	for i, n := range st.nodes {
		names[i] = n.Name
	}
	dirs, err := renderAll(ctx, confd, etc, dir, names, append([]string{"DATASTORE_TYPE=etcdv3"}, etcdEnv...))
	if err != nil {
		return nil, err
	}
	_, _, diffs, err := confdTopology(st, dirs)
	return diffs, err
}
