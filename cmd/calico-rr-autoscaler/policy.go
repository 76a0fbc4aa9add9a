package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/rest"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/policyapply"
)

const policyUsage = "Usage: calico-rr-autoscaler policy apply -f FILE [--kubeconfig FILE] [--timeout D]\n" +
	"       calico-rr-autoscaler policy keep --name NAME --release RELEASE --release-namespace NS [--kubeconfig FILE] [--timeout D]"

// runPolicy is `policy apply` (the chart's post-install and post-upgrade hook) and `policy keep`
// (its pre-upgrade hook); the work is package policyapply's.
func runPolicy(args []string, stdout io.Writer) error {
	sub := ""
	if len(args) > 0 {
		sub = args[0]
	}
	switch sub {
	case "apply":
		fs := flag.NewFlagSet("policy apply", flag.ContinueOnError)
		file := fs.String("f", "", "the RouteReflectorPolicy manifest (YAML or JSON; - for stdin)")
		return runAgainstCluster(fs, args[1:], stdout, strings.Split(policyUsage, "\n")[0],
			"Server-side-applies a RouteReflectorPolicy (field manager "+policyapply.FieldManager+", forced, with helm.sh/resource-policy: keep), "+
				"retrying while the API server cannot call the policy webhook; a refusal ends it at once. The chart's post-install and post-upgrade hook runs it.",
			4*time.Minute, "how long to retry while the policy webhook does not answer",
			func(ctx context.Context, cfg *rest.Config, timeout time.Duration, out io.Writer) error {
				if *file == "" {
					return usageError{fmt.Errorf("policy apply: -f is required")}
				}
				var doc []byte
				var err error
				if *file == "-" {
					doc, err = io.ReadAll(os.Stdin)
				} else {
					doc, err = os.ReadFile(*file)
				}
				if err != nil {
					return usageError{fmt.Errorf("-f: %v", err)}
				}
				if _, _, err := policyapply.Decode(doc); err != nil {
					return usageError{fmt.Errorf("-f %s: %v", *file, err)}
				}
				return policyapply.Apply(ctx, cfg, doc, timeout, policyapply.DefaultBackoff, out)
			})
	case "keep":
		fs := flag.NewFlagSet("policy keep", flag.ContinueOnError)
		name := fs.String("name", "", "the policy")
		release := fs.String("release", "", "the Helm release that may own it")
		ns := fs.String("release-namespace", "", "the release's namespace")
		return runAgainstCluster(fs, args[1:], stdout, strings.Split(policyUsage, "\n")[1],
			"Marks the policy helm.sh/resource-policy: keep when it is a resource of the Helm release that does not carry the mark, "+
				"so that helm upgrade from a chart that rendered it (0.2.0 and earlier) leaves it. The chart's pre-upgrade hook runs it.",
			2*time.Minute, "how long to retry while the API server does not answer",
			func(ctx context.Context, cfg *rest.Config, timeout time.Duration, out io.Writer) error {
				for _, f := range []struct{ flag, v string }{{"--name", *name}, {"--release", *release}, {"--release-namespace", *ns}} {
					if f.v == "" {
						return usageError{fmt.Errorf("policy keep: %s is required", f.flag)}
					}
				}
				return policyapply.Keep(ctx, cfg, *name, *release, *ns, timeout, policyapply.DefaultBackoff, out)
			})
	case "-h", "--help", "help":
		fmt.Fprintln(stdout, policyUsage)
		return errHelp
	}
	return usageError{fmt.Errorf("policy: want the subcommand apply or keep (%s)", strings.ReplaceAll(policyUsage, "\n       ", "; "))}
}
