// Package calicoetcd is the product's access to Calico's etcd datastore (DATASTORE_TYPE=etcdv3),
// through Calico's own client (libcalico-go/lib/clientv3): the route reflector role on Calico's
// Node resources (labels and spec.bgp.routeReflectorClusterID) and the BGPPeers. It never writes
// etcd keys itself.
//
// Running product: serve and the reconciler (etcdv3 mode), and the plan, verify and status commands
// call it.
//
// The slim build (go build -tags slim: the image's /calico-rr-autoscaler) has no etcd datastore:
// its Store is never made (ParseDatastore refuses etcdv3 and New fails), and it does not link
// Calico's client, the etcd client or gRPC. Everything else here (the datastore flags, the role a
// Calico Node carries, the Kubernetes shape of Calico's Nodes) is in both builds.
package calicoetcd

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
)

// The values of --datastore.
const (
	Kubernetes = "kubernetes"
	EtcdV3     = "etcdv3"
)

// ParseDatastore reads --datastore: kubernetes (the default) or etcdv3.
func ParseDatastore(s string) (string, error) {
	switch s {
	case "", Kubernetes:
		return Kubernetes, nil
	case EtcdV3:
		if !etcdBuiltIn {
			return "", errors.New("--datastore etcdv3: this binary is the slim build, without Calico's etcd datastore; run calico-rr-autoscaler-full (in the same image; the chart does with datastore.type etcdv3)")
		}
		return EtcdV3, nil
	}
	return "", fmt.Errorf("--datastore: %q is not kubernetes or etcdv3", s)
}

// Config is how to reach Calico's etcd: the flags Calico's own clients take (calicoctl's
// ETCD_ENDPOINTS, ETCD_KEY_FILE, ETCD_CERT_FILE, ETCD_CA_CERT_FILE).
type Config struct {
	Endpoints  string // comma-separated URLs, http:// or https://
	KeyFile    string
	CertFile   string
	CACertFile string
}

// Validate checks the endpoints and reads the TLS files, so that a mistake is one line at start
// rather than a connection that never comes up.
func (c Config) Validate() error {
	if strings.TrimSpace(c.Endpoints) == "" {
		return errors.New("--etcd-endpoints: empty; --datastore etcdv3 needs Calico's etcd endpoints (e.g. https://10.0.0.1:2379)")
	}
	for _, e := range strings.Split(c.Endpoints, ",") {
		u, err := url.Parse(strings.TrimSpace(e))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--etcd-endpoints: %q is not an http:// or https:// URL with a host", e)
		}
	}
	if (c.KeyFile == "") != (c.CertFile == "") {
		return errors.New("--etcd-key-file and --etcd-cert-file: give both or neither")
	}
	if c.CertFile != "" {
		if _, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile); err != nil {
			return fmt.Errorf("--etcd-cert-file %s / --etcd-key-file %s: %s", c.CertFile, c.KeyFile, oneLine(err))
		}
	}
	if c.CACertFile != "" {
		pem, err := os.ReadFile(c.CACertFile)
		if err != nil {
			return fmt.Errorf("--etcd-ca-cert-file: %s", oneLine(err))
		}
		if !x509.NewCertPool().AppendCertsFromPEM(pem) {
			return fmt.Errorf("--etcd-ca-cert-file %s: no PEM certificate in it", c.CACertFile)
		}
	}
	return nil
}

// oneLine keeps the first line of an error.
func oneLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
