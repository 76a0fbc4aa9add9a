// Command demo is `make demo`: on a machine with only Go it starts a real etcd and kube-apiserver
// on loopback (binaries built by hack/tools.sh), installs this product's, Calico's and
// cert-manager's CRDs, renders the Helm chart and applies it as a user would, runs
// `calico-rr-autoscaler serve` locally as the webhook backend, creates a few hundred simulated
// nodes in three zones and shows what the product does: route reflectors per zone, the statistics
// table, a cordon followed by the handover, and a manual change rejected with kubectl's real error.
// Ctrl-C or the end of the demo stops every process it started.
package main

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/nodesource"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/testenv"
)

const (
	namespace = "calico-rr-autoscaler"
	rrLabel   = "calico-route-reflector"
	zoneLabel = "topology.kubernetes.io/zone"
)

func main() {
	nodes := flag.Int("nodes", 300, "simulated nodes")
	zones := flag.Int("zones", 3, "zones")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *nodes, *zones); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func step(format string, a ...any) { fmt.Printf("\n==> "+format+"\n", a...) }

func run(ctx context.Context, nNodes, nZones int) error {
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "rra-demo-")
	if err != nil {
		return err
	}
	if os.Getenv("RRA_DEMO_KEEP") == "" {
		defer os.RemoveAll(work)
	} else {
		fmt.Println("    keeping", work)
	}

	// make demo (hack/demo.sh) compiles the product while the tools build and passes it here.
	bin := os.Getenv("RRA_PRODUCT_BIN")
	if bin == "" {
		step("Building calico-rr-autoscaler")
		if bin, err = testenv.BuildProduct(ctx, work); err != nil {
			return err
		}
	}

	step("Starting etcd and kube-apiserver on 127.0.0.1")
	env, err := testenv.StartEnv(ctx, testenv.Options{Users: testenv.DefaultUsers()})
	if err != nil {
		return err
	}
	defer env.Stop()
	fmt.Println("    API server:", env.URL)
	kubectl := func(user string, args ...string) (string, error) {
		return output(ctx, "", os.Getenv("KUBECTL"), append([]string{"--kubeconfig", env.KubeconfigPath(user)}, args...)...)
	}

	step("Installing CRDs: RouteReflectorPolicy, Calico, cert-manager")
	crdPaths := []string{filepath.Join(root, "charts", "calico-rr-autoscaler", "crds")}
	for _, m := range []struct{ mod, glob string }{
		{"github.com/projectcalico/calico", "libcalico-go/config/crd/crd.projectcalico.org_*.yaml"},
		{"github.com/cert-manager/cert-manager", "deploy/crds/*.yaml"},
	} {
		dir, err := output(ctx, root, "go", "list", "-m", "-f", "{{.Dir}}", m.mod)
		if err != nil {
			return err
		}
		files, _ := filepath.Glob(filepath.Join(strings.TrimSpace(dir), m.glob))
		crdPaths = append(crdPaths, files...)
	}
	crds, err := testenv.ReadCRDs(crdPaths...)
	if err != nil {
		return err
	}
	if _, err := testenv.ApplyCRDs(ctx, env.Config, crds); err != nil {
		return err
	}
	fmt.Printf("    %d CRDs established\n", len(crds))

	step("Serving the webhooks locally (calico-rr-autoscaler serve)")
	product, err := testenv.NewProduct(testenv.ProductOptions{Dir: work, Bin: bin, Args: []string{"--leader-elect=false", "-v", "1"}})
	if err != nil {
		return err
	}
	if err := product.Start(ctx, env.KubeconfigPath(testenv.UserServiceAccount), time.Minute); err != nil {
		return err
	}
	defer product.Stop()
	port, caPEM := product.WebhookPort, product.CAPEM
	fmt.Printf("    webhooks on https://127.0.0.1:%d, ready\n", port)

	step("Rendering the Helm chart and applying it (webhooks pointed at the local backend)")
	values := fmt.Sprintf(`certManager: {enabled: false}
webhook:
  url: https://127.0.0.1:%d
  caBundle: %s
policy:
  spec:
    removalDelay: 15s
    forbiddenNodeSelector: {matchLabels: {node-role.example.com/edge: "true"}}
`, port, base64.StdEncoding.EncodeToString(caPEM))
	rendered, err := renderChart(env.Config, filepath.Join(root, "charts", "calico-rr-autoscaler"), "calico-rr-autoscaler", namespace, values)
	if err != nil {
		return err
	}
	if _, err := kubectl(testenv.UserAdmin, "create", "namespace", namespace); err != nil {
		return err
	}
	manifest := filepath.Join(work, "rendered.yaml")
	if err := os.WriteFile(manifest, []byte(rendered), 0o644); err != nil {
		return err
	}
	out, err := kubectl(testenv.UserAdmin, "apply", "--server-side", "-f", manifest)
	if err != nil {
		return err
	}
	fmt.Print(indent(out))
	// The chart's post-install hook, as its Job would run it (no kubelet here): the policy from
	// the chart's ConfigMap, applied once the policy webhook answers.
	policyDoc, err := kubectl(testenv.UserAdmin, "get", "configmap", "calico-rr-autoscaler-policy", "-n", namespace, "-o", `jsonpath={.data.policy\.yaml}`)
	if err != nil {
		return err
	}
	chartPolicy := filepath.Join(work, "chart-policy.yaml")
	if err := os.WriteFile(chartPolicy, []byte(policyDoc), 0o644); err != nil {
		return err
	}
	out, err = output(ctx, "", bin, "policy", "apply", "-f", chartPolicy, "--kubeconfig", env.KubeconfigPath(testenv.UserAdmin))
	if err != nil {
		return err
	}
	fmt.Print(indent(out))

	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		return err
	}
	step("Creating %d nodes in %d zones (registering as a kubelet does: Node, then Ready via nodes/status)", nNodes, nZones)
	sim, err := nodesource.Simulate(nNodes, nZones)
	if err != nil {
		return err
	}
	start := time.Now()
	for i, n := range sim {
		n.CreationTimestamp = metav1.Time{}
		if i%25 == 0 {
			n.Labels["node-role.example.com/edge"] = "true"
		}
		status := n.Status
		n.Status = corev1.NodeStatus{}
		created, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		created.Status = status
		created.Status.Conditions[0].LastHeartbeatTime = metav1.Now()
		if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	fmt.Printf("    %d nodes registered in %s\n", nNodes, time.Since(start).Round(time.Millisecond))
	if err := waitSettled(ctx, cs, 60*time.Second); err != nil {
		return err
	}

	step("Route reflectors per zone (kubectl get nodes -l %s)", rrLabel)
	rrs, err := kubectl(testenv.UserAdmin, "get", "nodes", "-l", rrLabel, "-L", zoneLabel,
		"-L", extender.AnnotationClusterID, "-o", "custom-columns=NODE:.metadata.name,ZONE:.metadata.labels.topology\\.kubernetes\\.io/zone,CLUSTER-ID:.metadata.annotations.projectcalico\\.org/RouteReflectorClusterID")
	if err != nil {
		return err
	}
	fmt.Print(indent(rrs))
	out, _ = kubectl(testenv.UserAdmin, "get", "rrp")
	fmt.Print(indent(out))
	out, _ = kubectl(testenv.UserAdmin, "get", "bgppeers.crd.projectcalico.org", "-o", "custom-columns=NAME:.metadata.name,NODE-SELECTOR:.spec.nodeSelector,PEER-SELECTOR:.spec.peerSelector")
	fmt.Print(indent(out))

	step("The statistics table of the live cluster (calico-rr-autoscaler plan --nodes <(kubectl get nodes -o yaml))")
	nodesYAML, err := kubectl(testenv.UserAdmin, "get", "nodes", "-o", "yaml")
	if err != nil {
		return err
	}
	nodesFile := filepath.Join(work, "nodes.yaml")
	if err := os.WriteFile(nodesFile, []byte(nodesYAML), 0o644); err != nil {
		return err
	}
	policyYAML, _ := kubectl(testenv.UserAdmin, "get", "rrp", "default", "-o", "yaml")
	policyFile := filepath.Join(work, "policy.yaml")
	_ = os.WriteFile(policyFile, []byte(policyYAML), 0o644)
	out, err = output(ctx, "", bin, "plan", "--nodes", nodesFile, "--policy", policyFile)
	if err != nil {
		return err
	}
	fmt.Print(indent(out))

	victim := strings.Fields(strings.Split(strings.TrimSpace(rrs), "\n")[1])[0]
	step("kubectl cordon %s (a route reflector)", victim)
	out, err = kubectl(testenv.UserAlice, "cordon", victim)
	if err != nil {
		return err
	}
	fmt.Print(indent(out))
	if err := watchHandover(ctx, cs, victim, 60*time.Second); err != nil {
		return err
	}

	step("A manual change the policy forbids: kubectl label node <route reflector> %s-", rrLabel)
	list, _ := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: rrLabel})
	var target string
	for _, n := range list.Items {
		if _, draining := n.Annotations[extender.AnnotationDrainingSince]; !draining && n.Name != victim {
			target = n.Name
			break
		}
	}
	fmt.Printf("    $ kubectl label node %s %s-\n", target, rrLabel)
	_, err = kubectl(testenv.UserAlice, "label", "node", target, rrLabel+"-")
	var ee *exitError
	if errors.As(err, &ee) {
		fmt.Print(indent(ee.stderr))
	} else {
		// DualPlane: every client keeps its route reflector of the other plane, so the policy's
		// limits and every client's quorum hold; the reconciler then takes the role back or
		// replaces it.
		fmt.Println("    (allowed: no limit broken, every client keeps its other plane's route reflector)")
	}
	edge := sim[0].Name
	fmt.Printf("    $ kubectl label node %s %s=   (a forbidden node)\n", edge, rrLabel)
	_, err = kubectl(testenv.UserAlice, "label", "node", edge, rrLabel+"=")
	if errors.As(err, &ee) {
		fmt.Print(indent(ee.stderr))
	} else {
		fmt.Println("    (not rejected)")
	}

	step("Events")
	out, _ = kubectl(testenv.UserAdmin, "get", "events", "-A", "--field-selector", "reason!=Unknown", "-o", "custom-columns=OBJECT:.involvedObject.name,REASON:.reason,MESSAGE:.message", "--sort-by", ".lastTimestamp")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) > 15 {
		lines = append(lines[:1], lines[len(lines)-14:]...)
	}
	fmt.Print(indent(strings.Join(lines, "\n") + "\n"))

	step("Done: stopping calico-rr-autoscaler, kube-apiserver and etcd")
	return nil
}

// waitSettled waits until every node is either a route reflector with a cluster ID or a client
// with a peering set, and nothing changed for two seconds.
func waitSettled(ctx context.Context, cs kubernetes.Interface, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last, since := "", time.Now()
	for time.Now().Before(deadline) {
		list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		rr, clients := 0, 0
		var sig []string
		for _, n := range list.Items {
			_, isRR := n.Annotations[extender.AnnotationClusterID]
			_, isClient := n.Labels[extender.LabelPeeringSet]
			switch {
			case isRR:
				rr++
			case isClient:
				clients++
			}
			sig = append(sig, n.Name+n.ResourceVersion)
		}
		s := strings.Join(sig, ",")
		if s != last {
			last, since = s, time.Now()
		}
		if rr > 0 && rr+clients == len(list.Items) && time.Since(since) > 2*time.Second {
			fmt.Printf("    settled: %d route reflectors, %d clients\n", rr, clients)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return errors.New("nodes did not settle")
}

// watchHandover prints the handover of a cordoned route reflector as it happens.
func watchHandover(ctx context.Context, cs kubernetes.Interface, victim string, timeout time.Duration) error {
	start := time.Now()
	seen := map[string]bool{}
	say := func(key, format string, a ...any) {
		if !seen[key] {
			seen[key] = true
			fmt.Printf("    +%4.1fs  "+format+"\n", append([]any{time.Since(start).Seconds()}, a...)...)
		}
	}
	before := map[string]bool{}
	list, _ := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: rrLabel})
	for _, n := range list.Items {
		before[n.Name] = true
	}
	for time.Since(start) < timeout {
		list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		orphans := 0
		for _, n := range list.Items {
			_, isRR := n.Labels[rrLabel]
			if n.Name == victim {
				if s := n.Annotations[extender.AnnotationDrainingSince]; s != "" {
					say("drain", "%s marked draining since %s", victim, s)
				}
				if !isRR {
					say("demoted", "%s demoted: no longer a route reflector", victim)
				}
			} else if isRR && !before[n.Name] {
				say("promoted "+n.Name, "%s promoted (zone %s, cluster ID %s)", n.Name, n.Labels[zoneLabel], n.Annotations[extender.AnnotationClusterID])
			}
			if !isRR && n.Annotations[extender.AnnotationRouteReflectors] == "" {
				orphans++
			}
		}
		if orphans > 0 {
			say("orphans", "warning: %d clients without a route reflector", orphans)
		}
		if seen["demoted"] {
			moved := 0
			for _, n := range list.Items {
				if strings.Contains(n.Annotations[extender.AnnotationRouteReflectors], victim) {
					moved++
				}
			}
			fmt.Printf("    handover done in %.1fs; clients still on %s: %d\n", time.Since(start).Seconds(), victim, moved)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s was not handed over within %s", victim, timeout)
}

type exitError struct {
	err    error
	stderr string
}

func (e *exitError) Error() string { return e.err.Error() + ": " + strings.TrimSpace(e.stderr) }

func output(ctx context.Context, dir, bin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), &exitError{err: fmt.Errorf("%s %s", filepath.Base(bin), strings.Join(args, " ")), stderr: stderr.String()}
	}
	return string(out), nil
}

func indent(s string) string {
	if s == "" {
		return ""
	}
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return "    " + strings.Join(lines, "\n    ") + "\n"
}
