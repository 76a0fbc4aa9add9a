package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"
)

// parseFlags parses a command's flags. -h prints the usage lines and the flags to stdout and
// returns errHelp; a bad flag or an argument that is not a flag is a usageError (one line, exit 2).
func parseFlags(fs *flag.FlagSet, args []string, stdout io.Writer, usage ...string) error {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			for _, l := range usage {
				fmt.Fprintln(stdout, l)
			}
			fs.PrintDefaults()
			return errHelp
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("%s: unexpected argument %q", fs.Name(), fs.Arg(0))}
	}
	return nil
}

// checkOutput rejects an -o other than table or json.
func checkOutput(o string) error {
	if o != "table" && o != "json" {
		return usageError{fmt.Errorf("-o: %q is not table or json", o)}
	}
	return nil
}

// kubeConfig is the client configuration of a kubeconfig file, or with "" the default one
// ($KUBECONFIG, in-cluster, ~/.kube/config).
func kubeConfig(path string) (*rest.Config, error) {
	cfg, err := ctrlconfig.GetConfig()
	if path != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", path)
	}
	if err != nil {
		return nil, usageError{fmt.Errorf("--kubeconfig: %v", err)}
	}
	return cfg, nil
}
