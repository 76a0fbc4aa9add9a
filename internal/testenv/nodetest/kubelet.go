package nodetest

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KubeletFleet generates Nodes as a kubelet on a cloud instance registers them (EKS-like: the
// kubelet's own labels, the cloud provider's, a node pool's and the CSI driver's; the
// annotations of the kubelet, the attach-detach controller, the CSI driver and calico-node;
// addresses, capacity and allocatable, about 50 container images with digests and sizes, node
// info and the five conditions with heartbeats). Everything is derived from the node's index and
// the fleet's parameters, so a node of a 65,000-node fleet is generated, not stored: 10 to 20 KB
// of JSON each (TestKubeletNodeSize).
type KubeletFleet struct {
	Region string   // e.g. us-east-1
	Zones  []string // nodes are spread round-robin over them
	Pools  int      // node pools (instance type, capacity type and image per pool)
	Images int      // images per node [50]
}

// DefaultKubeletFleet is three zones of one region, eight node pools, 50 images per node.
func DefaultKubeletFleet() KubeletFleet {
	return KubeletFleet{Region: "us-east-1", Zones: []string{"us-east-1a", "us-east-1b", "us-east-1c"}, Pools: 8, Images: 50}
}

// KubeletName is the name of node i of a fleet (as EKS names nodes after their private DNS name).
func KubeletName(i int) string {
	return fmt.Sprintf("ip-10-%d-%d-%d.ec2.internal", 16+i>>16&0x0f, i>>8&0xff, i&0xff)
}

// Zone is the zone of node i.
func (f KubeletFleet) Zone(i int) string { return f.Zones[i%len(f.Zones)] }

// IP is the private IPv4 address of node i (10.16.0.0/12, unique up to 1,048,576 nodes).
func (f KubeletFleet) IP(i int) string {
	return fmt.Sprintf("10.%d.%d.%d", 16+i>>16&0x0f, i>>8&0xff, i&0xff)
}

type pool struct {
	name, instanceType, capacityType, ami, arch string
	cpu, memGiB, pods, eni                      int
}

var instanceTypes = []struct {
	name, arch         string
	cpu, memGiB, pods  int
	enis               int
	ephemeralStorageGi int
}{
	{"m6i.2xlarge", "amd64", 8, 32, 58, 4, 100},
	{"m6i.4xlarge", "amd64", 16, 64, 234, 8, 200},
	{"c6i.4xlarge", "amd64", 16, 32, 234, 8, 100},
	{"r6i.2xlarge", "amd64", 8, 64, 58, 4, 100},
	{"m7g.2xlarge", "arm64", 8, 32, 58, 4, 100},
	{"c7g.8xlarge", "arm64", 32, 64, 234, 8, 200},
	{"m6i.8xlarge", "amd64", 32, 128, 234, 8, 300},
	{"r6i.4xlarge", "amd64", 16, 128, 234, 8, 200},
}

func (f KubeletFleet) pool(i int) (int, pool) {
	p := i / len(f.Zones) % max(1, f.Pools)
	it := instanceTypes[p%len(instanceTypes)]
	capacity := "ON_DEMAND"
	if p%3 == 2 {
		capacity = "SPOT"
	}
	return p, pool{name: fmt.Sprintf("ng-%s-%d", it.name[:3], p), instanceType: it.name, capacityType: capacity,
		ami: fmt.Sprintf("ami-0%016x", hash64("ami", p)), arch: it.arch, cpu: it.cpu, memGiB: it.memGiB, pods: it.pods, eni: it.enis}
}

func hash64(parts ...any) uint64 {
	h := sha256.Sum256(fmt.Append(nil, parts...))
	return binary.BigEndian.Uint64(h[:8])
}

func digest(parts ...any) string {
	h := sha256.Sum256(fmt.Append(nil, parts...))
	return "sha256:" + hex.EncodeToString(h[:])
}

// imageCatalog is the images a fleet's nodes pull: the daemon sets' (on every node) and the
// workloads' (each node holds a different subset).
var daemonImages = []string{
	"602401143452.dkr.ecr.us-east-1.amazonaws.com/eks/kube-proxy:v1.34.1-minimal-eksbuild.2",
	"602401143452.dkr.ecr.us-east-1.amazonaws.com/eks/pause:3.10",
	"602401143452.dkr.ecr.us-east-1.amazonaws.com/eks/aws-ebs-csi-driver:v1.41.0",
	"602401143452.dkr.ecr.us-east-1.amazonaws.com/eks/csi-node-driver-registrar:v2.13.0-eks-1-33-1",
	"602401143452.dkr.ecr.us-east-1.amazonaws.com/eks/livenessprobe:v2.15.0-eks-1-33-1",
	"quay.io/calico/node:v3.30.2",
	"quay.io/calico/cni:v3.30.2",
	"quay.io/calico/pod2daemon-flexvol:v3.30.2",
	"quay.io/calico/csi:v3.30.2",
	"quay.io/calico/node-driver-registrar:v3.30.2",
	"quay.io/prometheus/node-exporter:v1.9.1",
	"public.ecr.aws/aws-observability/aws-for-fluent-bit:2.32.5",
	"registry.k8s.io/dns/k8s-dns-node-cache:1.25.0",
	"public.ecr.aws/datadog/agent:7.66.1",
}

var workloadRepos = []string{"api-gateway", "checkout", "payments", "search", "recommendations", "inventory",
	"catalog", "auth", "notifications", "orders", "billing", "profile", "media-transcoder", "feature-flags",
	"analytics-ingest", "ledger", "shipping", "reviews", "ads-serving", "fraud-scoring"}

// Kubelet is node i of the fleet as its kubelet registers it: NotReady (the container runtime not
// ready yet), with every other part of its status filled in, created at created.
func (f KubeletFleet) Kubelet(i int, created time.Time) *corev1.Node {
	name := KubeletName(i)
	zone := f.Zone(i)
	pi, p := f.pool(i)
	ip := f.IP(i)
	instanceID := fmt.Sprintf("i-0%016x", hash64("instance", i))
	labels := map[string]string{
		corev1.LabelHostname:                            name,
		corev1.LabelOSStable:                            "linux",
		corev1.LabelArchStable:                          p.arch,
		"beta.kubernetes.io/os":                         "linux",
		"beta.kubernetes.io/arch":                       p.arch,
		corev1.LabelInstanceTypeStable:                  p.instanceType,
		corev1.LabelInstanceType:                        p.instanceType,
		corev1.LabelTopologyZone:                        zone,
		corev1.LabelTopologyRegion:                      f.Region,
		corev1.LabelFailureDomainBetaZone:               zone,
		corev1.LabelFailureDomainBetaRegion:             f.Region,
		"topology.ebs.csi.aws.com/zone":                 zone,
		"topology.k8s.aws/zone-id":                      fmt.Sprintf("use1-az%d", 1+i%len(f.Zones)),
		"k8s.io/cloud-provider-aws":                     fmt.Sprintf("%032x", hash64("cluster")),
		"eks.amazonaws.com/nodegroup":                   p.name,
		"eks.amazonaws.com/nodegroup-image":             p.ami,
		"eks.amazonaws.com/capacityType":                p.capacityType,
		"eks.amazonaws.com/sourceLaunchTemplateId":      fmt.Sprintf("lt-0%016x", hash64("lt", pi)),
		"eks.amazonaws.com/sourceLaunchTemplateVersion": "3",
		"alpha.eksctl.io/cluster-name":                  "prod-use1",
		"alpha.eksctl.io/nodegroup-name":                p.name,
		"alpha.eksctl.io/instance-id":                   instanceID,
		"node-lifecycle":                                map[bool]string{true: "spot", false: "on-demand"}[p.capacityType == "SPOT"],
		"node.kubernetes.io/pool":                       p.name,
		"node-role.kubernetes.io/worker":                "",
		"team":                                          workloadRepos[pi%len(workloadRepos)],
		"environment":                                   "production",
		"cost-center":                                   fmt.Sprintf("cc-%04d", 1000+pi),
		"karpenter.k8s.aws/instance-category":           p.instanceType[:1],
		"karpenter.k8s.aws/instance-generation":         p.instanceType[1:2],
		"karpenter.k8s.aws/instance-cpu":                fmt.Sprint(p.cpu),
		"karpenter.k8s.aws/instance-memory":             fmt.Sprint(p.memGiB * 1024),
		"karpenter.k8s.aws/instance-network-bandwidth":  fmt.Sprint(p.cpu * 1562),
		"vpc.amazonaws.com/has-trunk-attached":          "false",
	}
	annotations := map[string]string{
		"node.alpha.kubernetes.io/ttl":                           "0",
		"volumes.kubernetes.io/controller-managed-attach-detach": "true",
		"csi.volume.kubernetes.io/nodeid":                        fmt.Sprintf(`{"csi.tigera.io":%q,"ebs.csi.aws.com":%q}`, name, instanceID),
		"alpha.kubernetes.io/provided-node-ip":                   ip,
		"projectcalico.org/IPv4Address":                          ip + "/19",
		"projectcalico.org/IPv4IPIPTunnelAddr":                   fmt.Sprintf("192.168.%d.%d", i>>6&0xff, (i&0x3f)<<2|1),
	}
	mem := resource.MustParse(fmt.Sprintf("%dKi", p.memGiB*1024*1024-int(hash64("mem", pi)%200000)))
	allocMem := mem.DeepCopy()
	allocMem.Sub(resource.MustParse("1434Mi"))
	cpu := resource.MustParse(fmt.Sprint(p.cpu))
	allocCPU := resource.MustParse(fmt.Sprintf("%dm", p.cpu*1000-90-p.cpu*10))
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:              cpu,
		corev1.ResourceMemory:           mem,
		corev1.ResourcePods:             resource.MustParse(fmt.Sprint(p.pods)),
		corev1.ResourceEphemeralStorage: resource.MustParse("104845292Ki"),
		"hugepages-1Gi":                 resource.MustParse("0"),
		"hugepages-2Mi":                 resource.MustParse("0"),
		"attachable-volumes-aws-ebs":    resource.MustParse("39"),
		"vpc.amazonaws.com/pod-eni":     resource.MustParse(fmt.Sprint(p.eni * 9)),
	}
	allocatable := corev1.ResourceList{
		corev1.ResourceCPU:              allocCPU,
		corev1.ResourceMemory:           allocMem,
		corev1.ResourcePods:             capacity[corev1.ResourcePods],
		corev1.ResourceEphemeralStorage: resource.MustParse("95551679124"),
		"hugepages-1Gi":                 resource.MustParse("0"),
		"hugepages-2Mi":                 resource.MustParse("0"),
		"attachable-volumes-aws-ebs":    resource.MustParse("39"),
		"vpc.amazonaws.com/pod-eni":     capacity["vpc.amazonaws.com/pod-eni"],
	}
	ct := metav1.NewTime(created.UTC().Truncate(time.Second))
	return &corev1.Node{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations},
		Spec:       corev1.NodeSpec{ProviderID: fmt.Sprintf("aws:///%s/%s", zone, instanceID)},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: allocatable,
			Conditions:  KubeletConditions(ct, ct, false),
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: ip},
				{Type: corev1.NodeHostName, Address: name},
				{Type: corev1.NodeInternalDNS, Address: name},
			},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
			NodeInfo: corev1.NodeSystemInfo{
				MachineID:               fmt.Sprintf("ec2%029x", hash64("machine", i)),
				SystemUUID:              fmt.Sprintf("ec2%05x-%04x-%04x-%04x-%012x", hash64("uuid", i)&0xfffff, i&0xffff, hash64("u2", i)&0xffff, hash64("u3", i)&0xffff, hash64("u4", i)&0xffffffffffff),
				BootID:                  fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", hash64("boot", i)&0xffffffff, i&0xffff, hash64("b2", i)&0xffff, hash64("b3", i)&0xffff, hash64("b4", i)&0xffffffffffff),
				KernelVersion:           "6.1.141-155.222.amzn2023.x86_64",
				OSImage:                 "Amazon Linux 2023.8.20250715",
				ContainerRuntimeVersion: "containerd://1.7.27",
				KubeletVersion:          "v1.34.1-eks-113cf36",
				KubeProxyVersion:        "v1.34.1-eks-113cf36",
				OperatingSystem:         "linux",
				Architecture:            p.arch,
			},
			Images: f.images(i),
		},
	}
}

// images is node i's image list: every daemon set's, then workload images chosen by the node.
func (f KubeletFleet) images(i int) []corev1.ContainerImage {
	n := f.Images
	if n == 0 {
		n = 50
	}
	out := make([]corev1.ContainerImage, 0, n)
	add := func(ref string) {
		repo := ref
		for j := len(ref) - 1; j >= 0 && ref[j] != '/'; j-- {
			if ref[j] == ':' {
				repo = ref[:j]
				break
			}
		}
		out = append(out, corev1.ContainerImage{
			Names:     []string{repo + "@" + digest(ref), ref},
			SizeBytes: int64(8<<20 + hash64("size", ref)%(400<<20)),
		})
	}
	for _, ref := range daemonImages {
		if len(out) == n {
			return out
		}
		add(ref)
	}
	for k := 0; len(out) < n; k++ {
		h := hash64("workload", i, k)
		repo := workloadRepos[h%uint64(len(workloadRepos))]
		add(fmt.Sprintf("123456789012.dkr.ecr.us-east-1.amazonaws.com/prod/%s:release-2026.%02d.%d-%07x", repo, 1+h>>8%12, h>>16%40, h>>24&0xfffffff))
	}
	return out
}

// KubeletConditions are the five conditions a kubelet (and calico-node, for NetworkUnavailable)
// reports: no pressure, the network up, Ready or not, heartbeat at heartbeat.
func KubeletConditions(heartbeat, transition metav1.Time, ready bool) []corev1.NodeCondition {
	c := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: heartbeat, LastTransitionTime: transition}
	}
	readyC := c(corev1.NodeReady, corev1.ConditionFalse, "KubeletNotReady", "container runtime status check may not have completed yet")
	if ready {
		readyC = c(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status")
	}
	return []corev1.NodeCondition{
		c(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
		c(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
		c(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
		c(corev1.NodeNetworkUnavailable, corev1.ConditionFalse, "CalicoIsUp", "Calico is running on this node"),
		readyC,
	}
}

// KubeletReadyPatch is the strategic merge patch of nodes/status a kubelet sends when its node
// turns Ready at now: the Ready condition's status, reason, message and times, and every other
// kubelet condition's heartbeat (the two-way patch the kubelet computes, with its element order).
func KubeletReadyPatch(now time.Time) []byte {
	ts := now.UTC().Format(time.RFC3339)
	return fmt.Appendf(nil, `{"status":{"$setElementOrder/conditions":[{"type":"MemoryPressure"},{"type":"DiskPressure"},{"type":"PIDPressure"},{"type":"NetworkUnavailable"},{"type":"Ready"}],`+
		`"conditions":[{"lastHeartbeatTime":%[1]q,"type":"MemoryPressure"},{"lastHeartbeatTime":%[1]q,"type":"DiskPressure"},{"lastHeartbeatTime":%[1]q,"type":"PIDPressure"},`+
		`{"lastHeartbeatTime":%[1]q,"lastTransitionTime":%[1]q,"message":"kubelet is posting ready status","reason":"KubeletReady","status":"True","type":"Ready"}]}}`, ts)
}

// KubeletHeartbeatPatch is the strategic merge patch of nodes/status a kubelet sends at its status
// report (every nodeStatusReportFrequency, 5 minutes by default) when nothing but the time changed:
// the heartbeat of every condition it owns (NetworkUnavailable is calico-node's, set once).
func KubeletHeartbeatPatch(now time.Time) []byte {
	ts := now.UTC().Format(time.RFC3339)
	return fmt.Appendf(nil, `{"status":{"$setElementOrder/conditions":[{"type":"MemoryPressure"},{"type":"DiskPressure"},{"type":"PIDPressure"},{"type":"NetworkUnavailable"},{"type":"Ready"}],`+
		`"conditions":[{"lastHeartbeatTime":%[1]q,"type":"MemoryPressure"},{"lastHeartbeatTime":%[1]q,"type":"DiskPressure"},{"lastHeartbeatTime":%[1]q,"type":"PIDPressure"},{"lastHeartbeatTime":%[1]q,"type":"Ready"}]}}`, ts)
}
