package serve

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// pagingReader serves n nodes' metadata as the API server pages a list: at most Limit items per
// response, with a continue token while more are left. It records each request's limit.
type pagingReader struct {
	n      int
	limits []int64
}

func (p *pagingReader) page(_ context.Context, o metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
	p.limits = append(p.limits, o.Limit)
	start := 0
	if o.Continue != "" {
		var err error
		if start, err = strconv.Atoi(o.Continue); err != nil {
			return nil, fmt.Errorf("continue %q", o.Continue)
		}
	}
	end := p.n
	if o.Limit > 0 {
		end = min(p.n, start+int(o.Limit))
	}
	l := &metav1.PartialObjectMetadataList{}
	for i := start; i < end; i++ {
		l.Items = append(l.Items, metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("node-%05d", i), ResourceVersion: strconv.Itoa(1000 + i)}})
	}
	if end < p.n {
		l.Continue = strconv.Itoa(end)
	}
	return l, nil
}

// TestNodeVersionsPages: the takeover's consistent read of every node's version goes in pages of
// catchUpPage (one response for 65,000 nodes' metadata was the restarted product's 1.1 GB peak)
// and keeps every node's name and version.
func TestNodeVersionsPages(t *testing.T) {
	for _, n := range []int{0, 1, catchUpPage, 2*catchUpPage + 7} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			r := &pagingReader{n: n}
			got, err := nodeVersions(t.Context(), r.page)
			require.NoError(t, err)
			require.Len(t, got, n)
			for i := range n {
				require.Equal(t, uint64(1000+i), got[fmt.Sprintf("node-%05d", i)])
			}
			require.Len(t, r.limits, max(1, (n+catchUpPage-1)/catchUpPage), "one request per page")
			for _, l := range r.limits {
				require.Equal(t, int64(catchUpPage), l, "every request is limited")
			}
		})
	}
}
