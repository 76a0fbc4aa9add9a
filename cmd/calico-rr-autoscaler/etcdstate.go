package main

import (
	"context"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calicoetcd"
)

// readEtcd reads the Calico state in etcd (Nodes, BGPPeers, BGPConfigurations; read only).
func readEtcd(cfg calicoetcd.Config) (*calicoetcd.State, error) {
	s, err := calicoetcd.New(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Check(ctx); err != nil {
		return nil, err
	}
	st, err := s.ReadState(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading Calico's state from etcd: %w", err)
	}
	return st, nil
}

// etcdPlanNodes are the nodes plan reads with --datastore etcdv3: the Kubernetes Nodes of --nodes
// (health, cordon, zones) with each one's route reflector role and BGP addresses as its Calico Node
// in etcd carries them, or, without --nodes, the Calico Nodes themselves (Calico keeps no health: taken as Ready).
func etcdPlanNodes(st *calicoetcd.State, kube []*corev1.Node, rrLabelKey string) []*extender.Node {
	if kube == nil {
		out := make([]*extender.Node, 0, len(st.Nodes))
		for _, n := range st.Nodes {
			n = n.DeepCopy()
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
			n.CreationTimestamp = metav1.Time{}
			out = append(out, extender.FromNode(n))
		}
		return out
	}
	calico := map[string]*corev1.Node{}
	for _, n := range st.Nodes {
		calico[n.Name] = n
	}
	owned := extender.OwnedLabelKeys(rrLabelKey)
	out := make([]*extender.Node, 0, len(kube))
	for _, k := range kube {
		c := calico[k.Name]
		if c == nil {
			out = append(out, extender.FromNode(k))
			continue
		}
		n := extender.FromNode(k).DeepCopy()
		role := calicoetcd.RoleOfNode(owned, extender.FromNode(c))
		n.Labels = extender.ApplyOwned(k.Labels, owned, role.Labels)
		id := map[string]string{}
		if role.ClusterID != "" {
			id[extender.AnnotationClusterID] = role.ClusterID
		}
		n.Annotations = extender.ApplyOwned(k.Annotations, []string{extender.AnnotationClusterID}, id)
		// Its BGP addresses (address families) are the Calico Node's, as KDD's annotations.
		addrs := extender.CalicoAddresses{IPv4: c.Annotations[extender.AnnotationCalicoIPv4], IPv6: c.Annotations[extender.AnnotationCalicoIPv6]}
		out = append(out, addrs.OnNode(n))
	}
	return out
}

// etcdFigures is what the graph model says of the state in etcd as it is.
type etcdFigures struct {
	Nodes        int     `json:"nodes"`
	BGPPeers     int     `json:"bgpPeers"`
	Mesh         bool    `json:"nodeToNodeMesh"`
	MissingPairs int64   `json:"missingPairs"`
	BusiestPaths float64 `json:"busiestPathsPerPrefix"`
	MeanPaths    float64 `json:"meanPathsPerPrefix"`
}

func etcdRouteFigures(st *calicoetcd.State) (*etcdFigures, error) {
	f := &etcdFigures{Nodes: len(st.Nodes), BGPPeers: len(st.Peers), Mesh: st.NodeToNodeMesh()}
	topo, err := bgpmodel.FromCluster(extender.FromNodes(st.Nodes), st.Peers, corev1.LabelTopologyZone, bgpmodel.Options{NodeToNodeMesh: f.Mesh})
	if err != nil {
		return nil, fmt.Errorf("route model of the state in etcd: %w", err)
	}
	m, err := topo.Propagate(nil)
	if err != nil {
		return nil, fmt.Errorf("route model of the state in etcd: %w", err)
	}
	f.MissingPairs = m.Summary.MissingPairs
	if n := float64(m.Summary.Nodes); n > 0 {
		f.BusiestPaths, f.MeanPaths = m.Summary.MaxRoutesPerNode/n, m.Summary.TotalRoutes/n/n
	}
	return f, nil
}

func (f *etcdFigures) print(w io.Writer) {
	fmt.Fprintf(w, "The state in etcd (graph model, %d Calico Nodes and %d BGPPeers as they are, node-to-node mesh %v): %d node pairs missing; paths per prefix %.1f on the busiest node, %.1f on the mean\n",
		f.Nodes, f.BGPPeers, f.Mesh, f.MissingPairs, f.BusiestPaths, f.MeanPaths)
}
