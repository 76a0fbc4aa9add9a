// Command metricsdoc writes the metrics reference of docs/operations.md from the product's metric
// definitions (run by `make generate`).
package main

import (
	"fmt"
	"os"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/tools/metricsdoc"
)

func main() {
	ms, err := metricsdoc.Collect(".")
	if err == nil {
		err = metricsdoc.Update("docs/operations.md", metricsdoc.Render(ms))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "metricsdoc:", err)
		os.Exit(1)
	}
}
