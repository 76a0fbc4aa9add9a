package bgpverify

// The calico speaker: Calico's own confd renders every node's BIRD configuration from a
// kube-apiserver that holds the state the product writes (Nodes with their labels and annotations,
// BGPPeers, the BGPConfiguration), and one BIRD 1.6 per node runs it in a network namespace of its
// own. Nothing of what BIRD runs is written here, except what the comments at the two rewrites
// below explain: the output paths of confd's templates (renderNode), and the empty krt_tunnel
// lines of bird_ipam.cfg that Debian's BIRD cannot read (dropEmptyKrtTunnel).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"
	"github.com/projectcalico/api/pkg/lib/numorstring"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/bgpmodel"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calico"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calico/crds"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
)

// SpeakerCalico runs confd and BIRD: see the package documentation.
const SpeakerCalico = "calico"

// ConfdVersion is the calico module version hack/tools.sh builds confd from (go.mod's).
const ConfdVersion = crds.Version

// The addresses the calico speaker gives nodes: node i is 100.64.0.0/16 + i + 1 (the annotation
// projectcalico.org/IPv4Address, CIDR form as calico-node writes it) and owns the pod block
// Block(i) (spec.podCIDRs; confd runs with USE_POD_CIDR=true), inside the one IP pool.
var (
	nodeNet = netip.MustParsePrefix("100.64.0.0/16")
	podPool = netip.MustParsePrefix("10.0.0.0/8")
)

// NodeAddress is the address node i gets with the calico speaker.
func NodeAddress(i int) netip.Prefix {
	b := nodeNet.Addr().As4()
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{b[0], b[1], byte((i + 1) >> 8), byte(i + 1)}), nodeNet.Bits())
}

// FindConfd returns the confd binary: path, else $CONFD, else hack/tools.sh's cache
// (<cache>/bin/confd-<ConfdVersion>). The error says how to get it.
func FindConfd(path string) (string, error) {
	if path == "" {
		path = os.Getenv("CONFD")
	}
	if path == "" {
		path = filepath.Join(testenv.CacheDir(), "bin", "confd-"+ConfdVersion)
	}
	st, err := os.Stat(path)
	if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("Calico's confd not found at %s: run `make tools` (hack/tools.sh builds it from the module proxy)", path)
	}
	return path, nil
}

// confdEtc returns the folder with confd's conf.d and templates: the calico module's
// confd/etc/calico/confd, found in the module cache as the CRDs are.
func confdEtc() (string, error) {
	if d := os.Getenv("CONFD_ETC"); d != "" {
		return d, nil
	}
	crdDir, err := crds.Dir()
	if err != nil {
		return "", err
	}
	// <module>/libcalico-go/config/crd -> <module>/confd/etc/calico/confd
	d := filepath.Join(crdDir, "..", "..", "..", "confd", "etc", "calico", "confd")
	if _, err := os.Stat(filepath.Join(d, "templates", "bird.cfg.template")); err != nil {
		return "", fmt.Errorf("confd's templates not found next to the Calico CRDs (set CONFD_ETC to a copy of %s/confd/etc/calico/confd): %v", crds.Module, err)
	}
	return filepath.Clean(d), nil
}

// calicoState is what confd reads from the API server, and the graph model of it.
type calicoState struct {
	policy string
	nodes  []*corev1.Node // in the model's order, with addresses and pod blocks
	addrs  []netip.Prefix // invalid for a node without an IPv4 address
	blocks []netip.Prefix
	// The IPv6 addresses (NodeAddress6) and blocks (Block6) of the nodes with an IPv6 address
	// (projectcalico.org/IPv6Address), invalid for the others.
	addrs6  []netip.Prefix
	blocks6 []netip.Prefix
	// routerID is confd's CALICO_ROUTER_ID ("" or "hash").
	routerID string
	peers    []apiv3.BGPPeer
	configs  []apiv3.BGPConfiguration
	model    *bgpmodel.Topology // the project's derivation of the sessions
	rrs      []string           // route reflectors in the order --fail-rr N counts them
}

// planState is the state the product writes for a plan: every node of the plan with its labels
// and annotations (the plan's owned keys replaced by the plan's values), the plan's BGPPeers, and
// the default BGPConfiguration (AS number, node-to-node mesh as asked).
func planState(in extender.Input, res *extender.Result, topo *bgpmodel.Topology, opts Options) (*calicoState, error) {
	byName := make(map[string]*extender.Node, len(in.Nodes))
	for _, n := range in.Nodes {
		if n != nil {
			byName[n.Name] = n
		}
	}
	rrKey := ""
	if in.Policy != nil {
		rrKey = in.Policy.RRLabelKey
	}
	st := &calicoState{policy: res.Policy, model: topo}
	for _, s := range res.Nodes {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: s.Name}}
		if orig := byName[s.Name]; orig != nil {
			n.Labels, n.Annotations = orig.Labels, orig.Annotations
		}
		n.Labels = extender.ApplyOwned(n.Labels, extender.OwnedLabelKeys(rrKey), s.Labels)
		n.Annotations = extender.ApplyOwned(n.Annotations, extender.OwnedAnnotationKeys(), s.Annotations)
		st.nodes = append(st.nodes, n)
	}
	for _, rr := range res.RouteReflectors {
		st.rrs = append(st.rrs, rr.Node)
	}
	for _, p := range res.BGPPeers {
		st.peers = append(st.peers, *calico.BGPPeer(calico.CRD, p))
	}
	asn := numorstring.ASNumber(opts.ASN)
	mesh := opts.NodeToNodeMesh
	st.configs = []apiv3.BGPConfiguration{{
		ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec:       apiv3.BGPConfigurationSpec{ASNumber: &asn, NodeToNodeMeshEnabled: &mesh},
	}}
	return st, st.assign(nil)
}

// assign gives node i the address NodeAddress(i) and the pod block Block(i). The sessions confd
// configures do not depend on them (BGPPeers select nodes by label), and every node then has an
// address and a block in the one pool; a BGPPeer's peerIP that was a node's address (realIP) is
// rewritten to the node's new one, so that it still names that node.
func (st *calicoState) assign(realIP map[string]int) error {
	if len(st.nodes) > 65000 {
		return inputErr("at most 65000 nodes fit the address plan")
	}
	st.addrs = make([]netip.Prefix, len(st.nodes))
	st.blocks = make([]netip.Prefix, len(st.nodes))
	st.addrs6 = make([]netip.Prefix, len(st.nodes))
	st.blocks6 = make([]netip.Prefix, len(st.nodes))
	no4 := st.model.FamilyDown(extender.FamilyIPv4, nil)
	no6 := st.model.FamilyDown(extender.FamilyIPv6, nil)
	for i, n := range st.nodes {
		ann := map[string]string{}
		var cidrs []string
		if !no4[i] {
			st.addrs[i], st.blocks[i] = NodeAddress(i), Block(i)
			ann[annotationIPv4Address] = st.addrs[i].String()
			cidrs = append(cidrs, st.blocks[i].String())
		}
		if !no6[i] {
			st.addrs6[i], st.blocks6[i] = NodeAddress6(i), Block6(i)
			ann[annotationIPv6Address] = st.addrs6[i].String()
			cidrs = append(cidrs, st.blocks6[i].String())
		}
		n.Annotations = extender.ApplyOwned(n.Annotations, []string{annotationIPv4Address, annotationIPv6Address}, ann)
		n.Spec.PodCIDR, n.Spec.PodCIDRs = cidrs[0], cidrs
	}
	for k := range st.peers {
		p := &st.peers[k]
		if p.Spec.PeerIP == "" {
			continue
		}
		host, port := p.Spec.PeerIP, ""
		if ap, err := netip.ParseAddrPort(host); err == nil {
			host, port = ap.Addr().String(), strconv.Itoa(int(ap.Port()))
		}
		if i, ok := realIP[host]; ok && st.addrs[i].IsValid() {
			p.Spec.PeerIP = st.addrs[i].Addr().String()
			if port != "" {
				p.Spec.PeerIP += ":" + port
			}
		}
	}
	return nil
}

const (
	annotationIPv4Address = "projectcalico.org/IPv4Address"
	annotationIPv6Address = "projectcalico.org/IPv6Address"
)

// liveState reads a live cluster's state: its Nodes, BGPPeers and BGPConfigurations, from the API
// group that serves them (calico.Detect), and derives its graph model (see objectState).
func liveState(ctx context.Context, cfg *rest.Config, opts Options) (*calicoState, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	gv, err := calico.Detect(cs.Discovery())
	if err != nil {
		return nil, err
	}
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	nodes := make([]*corev1.Node, len(list.Items))
	for i := range list.Items {
		nodes[i] = &list.Items[i]
	}
	peers, err := listCalico[apiv3.BGPPeer](ctx, dyn, gv.WithResource("bgppeers"))
	if err != nil {
		return nil, err
	}
	configs, err := listCalico[apiv3.BGPConfiguration](ctx, dyn, gv.WithResource("bgpconfigurations"))
	if err != nil {
		return nil, err
	}
	return objectState(nodes, peers, configs)
}

// objectState is the state of a cluster's Nodes (as the Kubernetes datastore stores them: labels,
// Calico's annotations), BGPPeers and BGPConfigurations. The graph model is derived from it as the
// product derives it: nodes as Calico reads them (bgpmodel.NodeFromObject), the BGPPeers, and the
// mesh as the default BGPConfiguration sets it (on when unset, Calico's default).
func objectState(in []*corev1.Node, inPeers []apiv3.BGPPeer, inConfigs []apiv3.BGPConfiguration) (*calicoState, error) {
	list := slices.Clone(in)
	slices.SortFunc(list, func(a, b *corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	st := &calicoState{policy: "(live cluster)"}
	realIP := map[string]int{}
	var nodes []bgpmodel.Node
	for i, n := range list {
		out := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: n.Labels, Annotations: n.Annotations}}
		if a := n.Annotations[annotationIPv4Address]; a != "" {
			if p, err := netip.ParsePrefix(a); err == nil {
				realIP[p.Addr().String()] = i
			} else if ad, err := netip.ParseAddr(a); err == nil {
				realIP[ad.String()] = i
			}
		}
		st.nodes = append(st.nodes, out)
		nodes = append(nodes, bgpmodel.NodeFromObject(n.Name, n.Labels, n.Annotations, corev1.LabelTopologyZone))
		if nodes[i].ClusterID != "" {
			st.rrs = append(st.rrs, n.Name)
		}
	}
	var peers []extender.BGPPeer
	for _, p := range inPeers {
		st.peers = append(st.peers, apiv3.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Labels: p.Labels}, Spec: p.Spec})
		peers = append(peers, extender.BGPPeer{Name: p.Name, Labels: p.Labels, Spec: p.Spec})
	}
	mesh := true
	for _, c := range inConfigs {
		if c.Name == "default" && c.Spec.NodeToNodeMeshEnabled != nil {
			mesh = *c.Spec.NodeToNodeMeshEnabled
		}
		st.configs = append(st.configs, apiv3.BGPConfiguration{ObjectMeta: metav1.ObjectMeta{Name: c.Name}, Spec: c.Spec})
	}
	var err error
	if st.model, err = bgpmodel.Build(nodes, peers, bgpmodel.Options{NodeToNodeMesh: mesh}); err != nil {
		return nil, InputError{err}
	}
	return st, st.assign(realIP)
}

// listCalico lists the Calico objects of gvr as T (none when the resource is not served).
func listCalico[T any](ctx context.Context, dyn dynamic.Interface, gvr schema.GroupVersionResource) ([]T, error) {
	l, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", gvr.GroupResource(), err)
	}
	out := make([]T, len(l.Items))
	for i := range l.Items {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(l.Items[i].Object, &out[i]); err != nil {
			return nil, fmt.Errorf("%s %s: %w", gvr.Resource, l.Items[i].GetName(), err)
		}
	}
	return out, nil
}

// Scratch is a kube-apiserver (and etcd) of internal/testenv with Calico's CRDs
// (crd.projectcalico.org/v1), the datastore confd renders from. A run replaces its Nodes,
// BGPPeers, BGPConfigurations and IPPools.
type Scratch struct {
	// renderMu holds two runs' writes and renders apart (renderState): runs may share a Scratch
	// and run their speakers side by side once rendered.
	renderMu   sync.Mutex
	env        *testenv.Env
	cs         kubernetes.Interface
	dyn        dynamic.Interface
	kubeconfig string
}

// StartScratch starts a Scratch from hack/tools.sh's binaries; Close stops it.
func StartScratch(ctx context.Context) (*Scratch, error) {
	dir, err := crds.Dir()
	if err != nil {
		return nil, err
	}
	all, err := testenv.ReadCRDs(dir)
	if err != nil {
		return nil, err
	}
	var want = all[:0]
	for _, c := range all {
		if c.Spec.Group == calico.CRD.Group {
			want = append(want, c)
		}
	}
	env, err := testenv.StartEnv(ctx, testenv.Options{})
	if err != nil {
		return nil, fmt.Errorf("starting a kube-apiserver for confd: %w (run `make tools`)", err)
	}
	s := &Scratch{env: env, kubeconfig: env.KubeconfigPath(testenv.UserAdmin)}
	ok := false
	defer func() {
		if !ok {
			env.Stop()
		}
	}()
	if _, err := testenv.ApplyCRDs(ctx, env.Config, want); err != nil {
		return nil, err
	}
	if s.cs, err = kubernetes.NewForConfig(env.Config); err != nil {
		return nil, err
	}
	if s.dyn, err = dynamic.NewForConfig(env.Config); err != nil {
		return nil, err
	}
	ok = true
	return s, nil
}

// Config is the admin's client config of the scratch API server.
func (s *Scratch) Config() *rest.Config { return rest.CopyConfig(s.env.Config) }

// Close stops the API server and etcd.
func (s *Scratch) Close() { s.env.Stop() }

var calicoResources = []string{"bgppeers", "bgpconfigurations", "ippools", "bgpfilters"}

// ConfdNamespace is the namespace confd runs in (its NAMESPACE), where it reads the Secrets of
// BGPPeer passwords: calico-node's with the Tigera operator.
const ConfdNamespace = "calico-system"

// labelPasswordSecret marks the Secrets a run writes for its BGPPeers' passwords.
const labelPasswordSecret = "verify.routereflector.io/bgp-password"

// passwordSecrets are the Secrets confd reads the state's BGPPeer passwords from: one per Secret
// name the BGPPeers' password.secretKeyRef name, with every key they name. The password itself is
// generated (a live cluster's Secrets are never read): every session between two BGPPeers that
// name the same key gets the same one, as in the cluster.
func passwordSecrets(peers []apiv3.BGPPeer) ([]*corev1.Secret, error) {
	byName := map[string]*corev1.Secret{}
	for _, p := range peers {
		if p.Spec.Password == nil || p.Spec.Password.SecretKeyRef == nil {
			continue
		}
		ref := p.Spec.Password.SecretKeyRef
		sec := byName[ref.Name]
		if sec == nil {
			sec = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: ref.Name, Namespace: ConfdNamespace,
				Labels: map[string]string{labelPasswordSecret: "true"}}, Data: map[string][]byte{}}
			byName[ref.Name] = sec
		}
		if _, ok := sec.Data[ref.Key]; ok {
			continue
		}
		b := make([]byte, 12)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		sec.Data[ref.Key] = []byte(hex.EncodeToString(b))
	}
	out := make([]*corev1.Secret, 0, len(byName))
	for _, k := range slices.Sorted(maps.Keys(byName)) {
		out = append(out, byName[k])
	}
	return out, nil
}

// writeSecrets replaces the Secrets of the previous run's passwords with those of peers.
func (s *Scratch) writeSecrets(ctx context.Context, peers []apiv3.BGPPeer) error {
	secrets, err := passwordSecrets(peers)
	if err != nil {
		return err
	}
	_, err = s.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ConfdNamespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace %s: %w", ConfdNamespace, err)
	}
	if err := s.cs.CoreV1().Secrets(ConfdNamespace).DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: labelPasswordSecret}); err != nil {
		return fmt.Errorf("clearing the password Secrets: %w", err)
	}
	for _, sec := range secrets {
		if _, err := s.cs.CoreV1().Secrets(ConfdNamespace).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("Secret %s/%s: %w", ConfdNamespace, sec.Name, err)
		}
	}
	return nil
}

// write replaces the scratch's state with st, and one IP pool: podPool with IP-in-IP and VXLAN
// off, plain BGP routing as the product wires it (the pool decides which prefixes BIRD exports
// and re-exports).
func (s *Scratch) write(ctx context.Context, st *calicoState) error {
	if err := s.cs.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return fmt.Errorf("clearing nodes: %w", err)
	}
	for _, r := range calicoResources {
		if err := s.dyn.Resource(calico.CRD.WithResource(r)).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			return fmt.Errorf("clearing %s: %w", r, err)
		}
	}
	if err := s.writeSecrets(ctx, st.peers); err != nil {
		return err
	}
	var objs []*unstructured.Unstructured
	add := func(kind string, obj any) error {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			return err
		}
		u := &unstructured.Unstructured{Object: m}
		u.SetAPIVersion(calico.CRD.String())
		u.SetKind(kind)
		objs = append(objs, u)
		return nil
	}
	for i := range st.peers {
		p := st.peers[i]
		p.ResourceVersion, p.UID, p.CreationTimestamp = "", "", metav1.Time{}
		if err := add(apiv3.KindBGPPeer, &p); err != nil {
			return err
		}
	}
	for i := range st.configs {
		if err := add(apiv3.KindBGPConfiguration, &apiv3.BGPConfiguration{ObjectMeta: metav1.ObjectMeta{Name: st.configs[i].Name}, Spec: st.configs[i].Spec}); err != nil {
			return err
		}
	}
	never := apiv3.IPIPModeNever
	if err := add(apiv3.KindIPPool, &apiv3.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "verify-pods"}, Spec: apiv3.IPPoolSpec{
		CIDR: podPool.String(), IPIPMode: never, VXLANMode: apiv3.VXLANModeNever, BlockSize: 24, NodeSelector: "all()",
	}}); err != nil {
		return err
	}
	if st.model.Families().Has(extender.FamilyIPv6) {
		// The IPv6 pool: bird6_ipam.cfg's calico_export_to_bgp_peers passes its blocks.
		if err := add(apiv3.KindIPPool, &apiv3.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "verify-pods-v6"}, Spec: apiv3.IPPoolSpec{
			CIDR: podPool6.String(), IPIPMode: never, VXLANMode: apiv3.VXLANModeNever, BlockSize: 122, NodeSelector: "all()",
		}}); err != nil {
			return err
		}
	}
	var mu sync.Mutex
	var errs []error
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	do := func(f func() error) {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := f(); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	for _, n := range st.nodes {
		do(func() error {
			_, err := s.cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("node %s: %w", n.Name, err)
			}
			return nil
		})
	}
	for _, u := range objs {
		do(func() error {
			res := strings.ToLower(u.GetKind()) + "s"
			_, err := s.dyn.Resource(calico.CRD.WithResource(res)).Create(ctx, u, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
			}
			return nil
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// renderState writes st and renders every node's configuration into dir/n<i>.
func (s *Scratch) renderState(ctx context.Context, st *calicoState, confd, dir string, logv func(string, ...any)) ([]string, error) {
	etc, err := confdEtc()
	if err != nil {
		return nil, err
	}
	s.renderMu.Lock()
	defer s.renderMu.Unlock()
	t := time.Now()
	if err := s.write(ctx, st); err != nil {
		return nil, err
	}
	logv("wrote %d nodes, %d BGPPeers, %d BGPConfigurations and an IP pool in %v", len(st.nodes), len(st.peers), len(st.configs), time.Since(t).Round(time.Millisecond))
	names := make([]string, len(st.nodes))
	for i, n := range st.nodes {
		names[i] = n.Name
	}
	start := time.Now()
	env := []string{
		"DATASTORE_TYPE=kubernetes",
		"KUBECONFIG=" + s.kubeconfig,
		"USE_POD_CIDR=true",
		"NAMESPACE=" + ConfdNamespace, // where confd reads the Secrets of BGPPeer passwords
	}
	if st.routerID != "" {
		env = append(env, "CALICO_ROUTER_ID="+st.routerID) // calico-node's environment
	}
	dirs, err := renderAll(ctx, confd, etc, dir, names, env)
	if err != nil {
		return nil, err
	}
	logv("confd rendered %d nodes' BIRD configurations in %v", len(names), time.Since(start).Round(time.Millisecond))
	return dirs, dropEmptyKrtTunnel(dirs)
}

// renderAll runs confd once per node (NODENAME), a few at a time, against the datastore that env
// names (DATASTORE_TYPE and its settings), and returns each node's folder below dir with its
// bird.cfg, bird_aggr.cfg and bird_ipam.cfg (and the IPv6 files).
func renderAll(ctx context.Context, confd, etc, dir string, names []string, env []string) ([]string, error) {
	tomls, err := filepath.Glob(filepath.Join(etc, "conf.d", "*.toml"))
	if err != nil || len(tomls) == 0 {
		return nil, fmt.Errorf("no conf.d/*.toml in %s", etc)
	}
	dirs := make([]string, len(names))
	errs := make([]error, len(names))
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for i, name := range names {
		dirs[i] = filepath.Join(dir, fmt.Sprintf("n%d", i))
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = renderNodeEnv(ctx, confd, etc, tomls, dirs[i], name, env)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return dirs, nil
}

// renderNodeEnv has confd render node name's BIRD configuration into dir, reading the datastore
// that env names (DATASTORE_TYPE and its settings).
func renderNodeEnv(ctx context.Context, confd, etc string, tomls []string, dir, name string, env []string) error {
	if err := os.MkdirAll(filepath.Join(dir, "conf.d"), 0o755); err != nil {
		return err
	}
	if err := os.Symlink(filepath.Join(etc, "templates"), filepath.Join(dir, "templates")); err != nil && !os.IsExist(err) {
		return err // (a Lab renders a node again into the same folder)
	}
	for _, t := range tomls {
		b, err := os.ReadFile(t)
		if err != nil {
			return err
		}
		// The one change to Calico's files: a template's output path (`dest`) is fixed in its
		// conf.d/*.toml (/etc/calico/confd/config/...); each node gets its own copy of conf.d
		// whose dest names a file in the node's own folder.
		out, n := rewriteDest(string(b), dir)
		if n != 1 {
			return fmt.Errorf("%s: %d dest lines", t, n)
		}
		if err := os.WriteFile(filepath.Join(dir, "conf.d", filepath.Base(t)), []byte(out), 0o644); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := confdCommand(ctx, confd, dir, name, env, "-onetime")
	out, err := cmd.CombinedOutput()
	_ = os.WriteFile(filepath.Join(dir, "confd.log"), out, 0o644)
	if err != nil {
		return fmt.Errorf("confd for node %s: %v: %s", name, err, lastLines(string(out), 5))
	}
	if _, err := os.Stat(filepath.Join(dir, "bird.cfg")); err != nil {
		return fmt.Errorf("confd for node %s wrote no bird.cfg: %s", name, lastLines(string(out), 5))
	}
	return nil
}

// confdCommand runs confd for node name with the conf.d and the templates of dir, writing without
// check or reload commands (-sync-only), reading the datastore that env names.
func confdCommand(ctx context.Context, confd, dir, name string, env []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, confd, append(args, "-sync-only", "-confdir", dir)...)
	cmd.Env = append([]string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"NODENAME=" + name,
		"BGP_LOGSEVERITYSCREEN=warning",
	}, env...)
	return cmd
}

// rewriteDest points every `dest = "..."` line of a conf.d toml at a file of the same name in dir.
func rewriteDest(toml, dir string) (string, int) {
	lines := strings.Split(toml, "\n")
	n := 0
	for i, l := range lines {
		k, v, ok := strings.Cut(l, "=")
		if !ok || strings.TrimSpace(k) != "dest" {
			continue
		}
		v = strings.Trim(strings.TrimSpace(v), `"`)
		lines[i] = fmt.Sprintf("dest = %q", filepath.Join(dir, filepath.Base(v)))
		n++
	}
	return strings.Join(lines, "\n"), n
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "; ")
}

// birdProtocol is one `protocol bgp` of a rendered bird.cfg.
type birdProtocol struct {
	name      string
	neighbor  netip.Addr
	as        uint32
	rrClient  bool
	clusterID string
	passive   bool
	// The session settings a BGPPeer carries (spec.bgpPeer of a policy).
	password    bool   // a `password` line
	restartTime string // `graceful restart time N`: N
	ttlSecurity bool   // `ttl security on`
}

// renderedConfig is what this package reads from a rendered bird.cfg.
type renderedConfig struct {
	routerID  string
	template  string // the body of `template bgp bgp_template`
	protocols []birdProtocol
}

// parseBIRDConfig reads the BGP protocols of a bird.cfg as confd renders it.
func parseBIRDConfig(text string) (*renderedConfig, error) {
	rc := &renderedConfig{}
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if v, ok := strings.CutPrefix(l, "router id "); ok {
			v, _, _ = strings.Cut(v, "#") // bird6.cfg: "router id A.B.C.D;  # Use IPv4 address ..."
			rc.routerID = strings.TrimSuffix(strings.TrimSpace(v), ";")
			continue
		}
		if !strings.HasPrefix(l, "protocol bgp ") && !strings.HasPrefix(l, "template bgp ") {
			continue
		}
		head := strings.Fields(l)
		var body []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "}"; i++ {
			body = append(body, strings.TrimSpace(lines[i]))
		}
		if head[0] == "template" {
			rc.template = strings.Join(body, "\n")
			continue
		}
		p := birdProtocol{name: head[2]}
		for _, b := range body {
			b, _, _ = strings.Cut(b, "#")
			f := strings.Fields(strings.TrimSuffix(strings.TrimSpace(b), ";"))
			switch {
			case len(f) >= 2 && f[0] == "neighbor":
				a, err := netip.ParseAddr(f[1])
				if err != nil {
					return nil, fmt.Errorf("protocol %s: neighbor %q: %v", p.name, f[1], err)
				}
				p.neighbor = a
				if k := slices.Index(f, "as"); k >= 0 && k+1 < len(f) {
					n, _ := strconv.ParseUint(f[k+1], 10, 32)
					p.as = uint32(n)
				}
			case len(f) == 2 && f[0] == "rr" && f[1] == "client":
				p.rrClient = true
			case len(f) == 4 && f[0] == "rr" && f[1] == "cluster" && f[2] == "id":
				p.clusterID = f[3]
			case len(f) == 2 && f[0] == "passive" && f[1] == "on":
				p.passive = true
			case len(f) >= 2 && f[0] == "password":
				p.password = true
			case len(f) == 4 && f[0] == "graceful" && f[1] == "restart" && f[2] == "time":
				p.restartTime = f[3]
			case len(f) == 3 && f[0] == "ttl" && f[1] == "security" && f[2] == "on":
				p.ttlSecurity = true
			}
		}
		if !p.neighbor.IsValid() {
			return nil, fmt.Errorf("protocol %s has no neighbor", p.name)
		}
		rc.protocols = append(rc.protocols, p)
	}
	if rc.routerID == "" {
		return nil, errors.New("no router id")
	}
	return rc, nil
}

// Options of bgp_template the graph model relies on.
var templateNeeds = []string{"add paths on;", "graceful restart;"}

// confdTopology reads every node's rendered configuration and returns the sessions confd
// configured as a topology (a session establishes when both ends configure it), each node's
// protocols, and every difference from the project's own derivation (st.model): a session one
// has and the other has not, an `rr client` or `rr cluster id` the model does not expect, a
// template without an option the model relies on.
func confdTopology(st *calicoState, dirs []string) (*bgpmodel.Topology, [][]birdProtocol, []string, error) {
	return confdTopologyFamily(st, dirs, extender.FamilyIPv4)
}

// confdTopologyFamily is confdTopology in family fam: bird.cfg (IPv4) or bird6.cfg (IPv6) of the
// nodes with an address of fam, against the model's sessions between such nodes.
func confdTopologyFamily(st *calicoState, dirs []string, fam extender.Families) (*bgpmodel.Topology, [][]birdProtocol, []string, error) {
	n := len(st.nodes)
	file, addrs := "bird.cfg", st.addrs
	if fam == extender.FamilyIPv6 {
		file, addrs = "bird6.cfg", st.addrs6
	}
	absent := st.model.FamilyDown(fam, nil)
	byAddr := make(map[netip.Addr]int, n)
	for i, a := range addrs {
		if a.IsValid() {
			byAddr[a.Addr()] = i
		}
	}
	protos := make([][]birdProtocol, n)
	configured := make([]map[int]birdProtocol, n)
	var diffs []string
	for i, d := range dirs {
		if absent[i] {
			continue
		}
		b, err := os.ReadFile(filepath.Join(d, file))
		if err != nil {
			return nil, nil, nil, err
		}
		rc, err := parseBIRDConfig(string(b))
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%s/%s: %w", d, file, err)
		}
		name := st.nodes[i].Name
		switch {
		case st.routerID == bgpmodel.RouterIDHash:
			if want := bgpmodel.HashToIPv4(name); rc.routerID != want {
				diffs = append(diffs, fmt.Sprintf("%s: %s: router id %s, not the hash of its name %s", name, file, rc.routerID, want))
			}
		case rc.routerID != st.addrs[i].Addr().String():
			diffs = append(diffs, fmt.Sprintf("%s: %s: router id %s, not its IPv4 address %s", name, file, rc.routerID, st.addrs[i].Addr()))
		}
		for _, need := range templateNeeds {
			if len(rc.protocols) > 0 && !strings.Contains(rc.template, need) {
				diffs = append(diffs, fmt.Sprintf("%s: bgp_template has no %q", name, need))
			}
		}
		protos[i] = rc.protocols
		configured[i] = map[int]birdProtocol{}
		for _, p := range rc.protocols {
			j, ok := byAddr[p.neighbor]
			if !ok {
				diffs = append(diffs, fmt.Sprintf("%s: protocol %s peers with %s, not a node", name, p.name, p.neighbor))
				continue
			}
			if _, dup := configured[i][j]; dup {
				diffs = append(diffs, fmt.Sprintf("%s: two protocols toward %s", name, st.nodes[j].Name))
			}
			configured[i][j] = p
		}
	}
	// The sessions confd configured, as BGPPeers the model's Build reads back exactly: node i
	// peers with the nodes labelled with the indexes it configured, without reverse peering.
	nodes := make([]bgpmodel.Node, n)
	var peers []extender.BGPPeer
	manual := apiv3.ReversePeeringManual
	for i := range nodes {
		m := st.model.Nodes[i]
		nodes[i] = bgpmodel.Node{Name: m.Name, Zone: m.Zone, ClusterID: m.ClusterID, Families: m.Families, Labels: map[string]string{"verify.node": strconv.Itoa(i)}}
		if len(configured[i]) == 0 {
			continue
		}
		var idx []string
		for j := range configured[i] {
			idx = append(idx, "'"+strconv.Itoa(j)+"'")
		}
		sort.Strings(idx)
		peers = append(peers, extender.BGPPeer{Name: fmt.Sprintf("confd-%d", i), Spec: apiv3.BGPPeerSpec{
			Node: m.Name, PeerSelector: "verify.node in {" + strings.Join(idx, ",") + "}", ReversePeering: &manual,
		}})
	}
	topo, err := bgpmodel.Build(nodes, peers, bgpmodel.Options{})
	if err != nil {
		return nil, nil, nil, err
	}
	diffs = append(diffs, compareSessions(st, topo, configured, absent)...)
	diffs = append(diffs, settingsDifferences(st, protos)...)
	return topo, protos, diffs, nil
}

// commonSettings are the session settings every one of the state's BGPPeers carries (a policy's
// spec.bgpPeer): a password, a graceful restart time in whole seconds as confd writes it, TTL
// security. A setting some BGPPeers lack is not expected anywhere.
func commonSettings(peers []apiv3.BGPPeer) (password bool, restart string, ttl bool) {
	if len(peers) == 0 {
		return false, "", false
	}
	password, ttl = true, true
	for k, p := range peers {
		s := p.Spec
		password = password && s.Password != nil && s.Password.SecretKeyRef != nil
		ttl = ttl && s.TTLSecurity != nil && *s.TTLSecurity > 0
		r := ""
		if s.MaxRestartTime != nil {
			r = strconv.Itoa(int(math.Round(s.MaxRestartTime.Seconds())))
		}
		if k == 0 {
			restart = r
		} else if r != restart {
			restart = ""
		}
	}
	return password, restart, ttl
}

// settingsDifferences lists the BGP protocols (those confd renders from BGPPeers, not the
// node-to-node mesh's) that lack a setting every BGPPeer carries: confd renders no password when
// it cannot read the Secret, for one.
func settingsDifferences(st *calicoState, protos [][]birdProtocol) []string {
	password, restart, ttl := commonSettings(st.peers)
	var diffs []string
	for i, ps := range protos {
		for _, p := range ps {
			if strings.HasPrefix(p.name, "Mesh_") {
				continue
			}
			if password && !p.password {
				diffs = append(diffs, fmt.Sprintf("%s: protocol %s has no password, though every BGPPeer sets one (confd reads it from the Secret)", st.nodes[i].Name, p.name))
			}
			if restart != "" && p.restartTime != restart {
				diffs = append(diffs, fmt.Sprintf("%s: protocol %s has graceful restart time %q, every BGPPeer's maxRestartTime is %ss", st.nodes[i].Name, p.name, p.restartTime, restart))
			}
			if ttl && !p.ttlSecurity {
				diffs = append(diffs, fmt.Sprintf("%s: protocol %s has no ttl security, though every BGPPeer sets ttlSecurity", st.nodes[i].Name, p.name))
			}
		}
	}
	return diffs
}

// renderedSettings counts the session settings of every node's BGP protocols.
func renderedSettings(protos [][]birdProtocol) *RenderedSettings {
	r := &RenderedSettings{}
	for _, ps := range protos {
		for _, p := range ps {
			r.Protocols++
			if p.password {
				r.Password++
			}
			if p.ttlSecurity {
				r.TTLSecurity++
			}
			if p.restartTime != "" {
				if r.RestartTime == nil {
					r.RestartTime = map[string]int{}
				}
				r.RestartTime[p.restartTime]++
			}
		}
	}
	return r
}

// compareSessions lists where confd's sessions and options differ from the model's derivation.
// Only the sessions between nodes not absent (without an address of the family compared) are
// the model's.
func compareSessions(st *calicoState, got *bgpmodel.Topology, configured []map[int]birdProtocol, absent []bool) []string {
	m := st.model
	name := func(i int) string { return m.Nodes[i].Name }
	want := map[[2]int]bool{}
	for _, s := range m.Sessions {
		if !absent[s[0]] && !absent[s[1]] {
			want[[2]int{int(s[0]), int(s[1])}] = true
		}
	}
	if m.Mesh {
		for a := range m.Nodes {
			for b := a + 1; b < len(m.Nodes); b++ {
				if !m.IsRR(a) && !m.IsRR(b) && !absent[a] && !absent[b] {
					want[[2]int{a, b}] = true
				}
			}
		}
	}
	have := map[[2]int]bool{}
	for _, s := range got.Sessions {
		have[[2]int{int(s[0]), int(s[1])}] = true
	}
	var diffs []string
	for _, k := range sortedPairs(want) {
		if !have[k] {
			diffs = append(diffs, fmt.Sprintf("session %s-%s: the model has it, confd does not configure it at both ends", name(k[0]), name(k[1])))
		}
	}
	for _, k := range sortedPairs(have) {
		if !want[k] {
			diffs = append(diffs, fmt.Sprintf("session %s-%s: confd configures it at both ends, the model has none", name(k[0]), name(k[1])))
		}
	}
	if got.OneSided != m.OneSided && !slices.Contains(absent, true) {
		diffs = append(diffs, fmt.Sprintf("one-sided peerings: confd %d, the model %d", got.OneSided, m.OneSided))
	}
	for a := range configured {
		for _, b := range slices.Sorted(mapKeys(configured[a])) {
			p := configured[a][b]
			if !have[pair(a, b)] {
				continue
			}
			if w := m.RRClient(a, b); p.rrClient != w {
				diffs = append(diffs, fmt.Sprintf("%s toward %s: rr client %v, the model says %v", name(a), name(b), p.rrClient, w))
			}
			if p.rrClient && p.clusterID != m.Nodes[a].ClusterID {
				diffs = append(diffs, fmt.Sprintf("%s toward %s: rr cluster id %q, the node's is %q", name(a), name(b), p.clusterID, m.Nodes[a].ClusterID))
			}
		}
	}
	return diffs
}

func pair(a, b int) [2]int {
	if a > b {
		a, b = b, a
	}
	return [2]int{a, b}
}

func sortedPairs(m map[[2]int]bool) [][2]int {
	out := make([][2]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.SortFunc(out, func(x, y [2]int) int {
		if x[0] != y[0] {
			return x[0] - y[0]
		}
		return x[1] - y[1]
	})
	return out
}

func mapKeys[V any](m map[int]V) func(func(int) bool) {
	return func(yield func(int) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// dropEmptyKrtTunnel makes bird_ipam.cfg readable by Debian's BIRD, the second (and last) change
// to what confd renders. Calico's bird_ipam.cfg.template writes `krt_tunnel = "<interface>";` for
// every pool that is not VXLAN in the filter calico_kernel_programming (routes BIRD exports to the
// kernel) whenever the node's network is known, and krt_tunnel is an attribute of Calico's fork
// of BIRD only. With the pool written here (IP-in-IP and VXLAN off) the value is "", no tunnel,
// which is what BIRD does without the line; the line goes and nothing else changes. It touches
// neither a BGP session nor what BGP exports. Any other krt_tunnel stops the run.
func dropEmptyKrtTunnel(dirs []string) error {
	for _, d := range dirs {
		p := filepath.Join(d, "bird_ipam.cfg")
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		lines := strings.Split(string(b), "\n")
		out := lines[:0]
		dropped := false
		for _, l := range lines {
			t := strings.TrimSpace(l)
			if strings.HasPrefix(t, `krt_tunnel = "";`) {
				dropped = true
				continue
			}
			if strings.Contains(t, "krt_tunnel") {
				return fmt.Errorf("%s sets a tunnel (%s), which only Calico's fork of BIRD knows", p, t)
			}
			out = append(out, l)
		}
		if !dropped {
			continue // (a Lab's follow loop looks every 100 ms: write only what changes)
		}
		if err := os.WriteFile(p, []byte(strings.Join(out, "\n")), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// runCalico writes st to a scratch API server, renders every node's configuration with confd and
// runs one BIRD per node, each in a network namespace of its own.
func runCalico(ctx context.Context, st *calicoState, opts Options) (*Report, error) {
	confd, err := FindConfd(opts.Confd)
	if err != nil {
		return nil, err
	}
	bird, err := FindBIRD(opts.BIRD)
	if err != nil {
		return nil, err
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		return nil, fmt.Errorf("%w: iproute2's ip not found (%v)", ErrNoNetns, err)
	}
	logv := func(format string, a ...any) { logf(opts, format, a...) }
	scratch := opts.Scratch
	if scratch == nil {
		t := time.Now()
		if scratch, err = StartScratch(ctx); err != nil {
			return nil, err
		}
		defer scratch.Close()
		logv("started a kube-apiserver with Calico's CRDs for confd in %v", time.Since(t).Round(time.Millisecond))
	}
	// Control socket paths must stay under 108 bytes: a short directory under /tmp.
	dir, err := os.MkdirTemp("/tmp", fmt.Sprintf("rrc%d-", os.Getpid())) // swept when this process is gone
	if err != nil {
		return nil, err
	}
	st.routerID = opts.CalicoRouterID
	if ids, err := bgpmodel.CheckRouterIDs(st.model.Nodes, st.routerID); err != nil || len(ids.Missing) > 0 {
		os.RemoveAll(dir)
		if err != nil {
			return nil, InputError{err}
		}
		return nil, inputErr("%s: BIRD would not load their configurations (run with --calico-router-id hash, calico-node's CALICO_ROUTER_ID=hash)", ids)
	}
	dirs, err := scratch.renderState(ctx, st, confd, dir, logv)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if usesFamilies(st.model, opts) {
		return runCalicoFamilies(ctx, st, opts, ip, bird, dir, dirs)
	}
	topo, protos, diffs, err := confdTopology(st, dirs)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	for _, d := range diffs {
		logv("confd and the model differ: %s", d)
	}
	down, downNames, err := failureMask(topo, st.rrs, opts)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	addrs := make([]netip.Addr, len(st.addrs))
	for i, a := range st.addrs {
		addrs[i] = a.Addr()
	}
	nodes := speakerNodesAt(topo, addrs, st.blocks)
	configs := make([]string, len(nodes))
	for i := range nodes {
		configs[i] = filepath.Join(dirs[i], "bird.cfg")
	}
	lab, err := newNetLab(ip, len(nodes))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	f := &birdFleet{nodes: nodes, opts: opts, bin: bird, dir: dir, lab: lab, configs: configs,
		filter: " where net ~ " + podPool.String(), procs: make([]*exec.Cmd, len(nodes)), conns: make([]*birdConn, len(nodes))}
	t := time.Now()
	if err := lab.setup(st.addrs, nil); err != nil {
		f.close()
		return nil, fmt.Errorf("%w: %v", ErrNoNetns, err)
	}
	logv("created %d network namespaces on one bridge in %v", len(nodes), time.Since(t).Round(time.Millisecond))
	logv("starting %d BIRDs with confd's configurations: %d sessions", len(nodes), topo.SessionCount(nil))
	rep, err := runFleet(ctx, f, fleetRun{policy: st.policy, topo: topo, model: st.model, nodes: nodes, down: down, downNames: downNames}, opts)
	if err != nil {
		return nil, err
	}
	rep.ConfigDifferences = diffs
	rep.Rendered = renderedSettings(protos)
	return rep, nil
}

// runCalicoFamilies runs confd's configurations per address family: bird with bird.cfg on the
// nodes with an IPv4 address, bird6 with bird6.cfg on those with an IPv6 address, side by side in
// the nodes' namespaces (each eth0 has the node's addresses of both families).
func runCalicoFamilies(ctx context.Context, st *calicoState, opts Options, ip, bird, dir string, dirs []string) (*Report, error) {
	logv := func(format string, a ...any) { logf(opts, format, a...) }
	down, downNames, err := failureMask(st.model, st.rrs, opts)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	n := len(st.nodes)
	lab, err := newNetLab(ip, n)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	run := famRun{policy: st.policy, model: st.model, rrs: st.rrs, down: down, downNames: downNames,
		cleanup: func() { lab.close(); os.RemoveAll(dir) }}
	var fleets []famFleet
	var diffs []string
	rendered := &RenderedSettings{}
	fail := func(err error) (*Report, error) {
		for _, fl := range fleets {
			fl.f.close()
		}
		run.cleanup()
		return nil, err
	}
	fams := st.model.Families()
	for _, fam := range extender.AllFamilies {
		if !fams.Has(fam) {
			continue
		}
		topo, protos, d, err := confdTopologyFamily(st, dirs, fam)
		if err != nil {
			return fail(err)
		}
		for _, x := range d {
			diffs = append(diffs, fam.String()+": "+x)
		}
		r := renderedSettings(protos)
		rendered.Protocols += r.Protocols
		rendered.Password += r.Password
		rendered.TTLSecurity += r.TTLSecurity
		for k, v := range r.RestartTime {
			if rendered.RestartTime == nil {
				rendered.RestartTime = map[string]int{}
			}
			rendered.RestartTime[k] += v
		}
		bin, file, addrs, blocks, pool, tag := bird, "bird.cfg", st.addrs, st.blocks, podPool, ""
		if fam == extender.FamilyIPv6 {
			if bin, err = exec.LookPath("bird6"); err != nil {
				return fail(fmt.Errorf("bird6 not found (%v): Debian's bird package ships it (make tools)", err))
			}
			file, addrs, blocks, pool, tag = "bird6.cfg", st.addrs6, st.blocks6, podPool6, "6"
		}
		as := make([]netip.Addr, n)
		for i, a := range addrs {
			as[i] = a.Addr()
		}
		nodes := familyNodes(topo, fam, as, blocks, nil)
		configs := make([]string, n)
		for i := range nodes {
			configs[i] = filepath.Join(dirs[i], file)
		}
		f := &birdFleet{nodes: nodes, opts: opts, bin: bin, dir: dir, lab: lab, sharedLab: true, tag: tag, configs: configs,
			filter: " where net ~ " + pool.String(), procs: make([]*exec.Cmd, n), conns: make([]*birdConn, n)}
		fleets = append(fleets, famFleet{fam: fam, f: f, topo: topo, nodes: nodes})
		logv("%s: %d sessions in confd's %s", fam, topo.SessionCount(topo.FamilyDown(fam, nil)), file)
	}
	for _, d := range diffs {
		logv("confd and the model differ: %s", d)
	}
	t := time.Now()
	if err := lab.setup(st.addrs, st.addrs6); err != nil {
		return fail(fmt.Errorf("%w: %v", ErrNoNetns, err))
	}
	logv("created %d network namespaces on one bridge in %v", n, time.Since(t).Round(time.Millisecond))
	rep, err := runFamilies(ctx, fleets, run, opts)
	if err != nil {
		return nil, err
	}
	rep.ConfigDifferences = diffs
	rep.Rendered = rendered
	return rep, nil
}

// VerifyCluster checks a live cluster's own state: it reads the cluster's Nodes, BGPPeers and
// BGPConfigurations (read access only; nothing is written to the cluster) and verifies them as
// VerifyObjects does.
func VerifyCluster(ctx context.Context, cfg *rest.Config, opts Options) (*Report, error) {
	st, err := liveState(ctx, cfg, opts)
	if err != nil {
		return nil, err
	}
	return verifyState(ctx, st, opts)
}

// VerifyObjects checks a cluster's state given as objects (from Calico's etcd datastore, say:
// Nodes in the Kubernetes datastore's shape, see calicoetcd.KubernetesShape): it replays them into
// a scratch kube-apiserver with node addresses and pod blocks of its own (see assign), has
// Calico's confd render every node's BIRD configuration from there and runs one BIRD per node
// (Speaker calico, the default), or runs the sessions the project derives from that state on
// GoBGP or BIRD speakers. The failure drills of opts apply; --fail-rr N counts route reflectors
// by name.
func VerifyObjects(ctx context.Context, nodes []*corev1.Node, peers []apiv3.BGPPeer, configs []apiv3.BGPConfiguration, opts Options) (*Report, error) {
	st, err := objectState(nodes, peers, configs)
	if err != nil {
		return nil, err
	}
	return verifyState(ctx, st, opts)
}

func verifyState(ctx context.Context, st *calicoState, opts Options) (*Report, error) {
	if opts.Speaker == "" {
		opts.Speaker = SpeakerCalico
	}
	opts, err := prepare(opts, len(st.nodes))
	if err != nil {
		return nil, err
	}
	if opts.Speaker == SpeakerCalico {
		return runCalico(ctx, st, opts)
	}
	if usesFamilies(st.model, opts) {
		return runSpeakerFamilies(ctx, st.policy, st.model, st.rrs, opts)
	}
	return runSpeakers(ctx, st.policy, st.model, st.rrs, opts)
}
