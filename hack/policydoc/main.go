// Command policydoc writes docs/policy-reference.md from policy/crd (run by `make generate`).
package main

import (
	"fmt"
	"os"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/tools/policydoc"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: policydoc CRD.yaml OUT.md")
		os.Exit(2)
	}
	in, err := os.ReadFile(os.Args[1])
	if err == nil {
		var out string
		if out, err = policydoc.Render(in); err == nil {
			err = os.WriteFile(os.Args[2], []byte(out), 0o644)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "policydoc:", err)
		os.Exit(1)
	}
}
