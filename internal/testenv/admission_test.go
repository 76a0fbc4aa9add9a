package testenv

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
)

// TestAdmissionRecorder: a review over TLS is allowed with its UID and recorded; a bad body is a 400.
func TestAdmissionRecorder(t *testing.T) {
	dir := t.TempDir()
	caPEM, err := WriteWebhookCert(dir)
	require.NoError(t, err)
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	rec := StartAdmissionRecorder(t, ln, &tls.Config{Certificates: []tls.Certificate{pair}})

	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(caPEM))
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	url := "https://" + ln.Addr().String() + "/validate-v1-node"

	body, err := json.Marshal(admissionv1.AdmissionReview{Request: &admissionv1.AdmissionRequest{
		UID: "u-1", Operation: admissionv1.Update, SubResource: "status", Name: "node-1",
		UserInfo: authenticationv1.UserInfo{Username: "alice"}}})
	require.NoError(t, err)
	resp, err := client.Post(url, "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	var got admissionv1.AdmissionReview
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
	resp.Body.Close()
	require.NotNil(t, got.Response)
	assert.True(t, got.Response.Allowed)
	assert.EqualValues(t, "u-1", got.Response.UID)

	resp, err = client.Post(url, "application/json", bytes.NewReader([]byte("{")))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)

	assert.Equal(t, 1, rec.Calls())
	assert.Equal(t, []Review{{Path: "/validate-v1-node", Operation: "UPDATE", SubResource: "status", User: "alice", Name: "node-1"}}, rec.Take())
	assert.Empty(t, rec.Take(), "Take forgets")
}
