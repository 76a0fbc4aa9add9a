package testenv

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStartEtcd: etcd alone answers its health check; no API server is started.
func TestStartEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("needs etcd (hack/tools.sh)")
	}
	env := StartEtcd(t)
	require.NotEmpty(t, env.EtcdURL)
	assert.Empty(t, env.URL, "no kube-apiserver")
	resp, err := http.Get(env.EtcdURL + "/health")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}
