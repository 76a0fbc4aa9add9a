// Package calicoetcd is the product's access to Calico's etcd datastore (DATASTORE_TYPE=etcdv3),
// through Calico's own client (libcalico-go/lib/clientv3): the route reflector role on Calico's
// Node resources (labels and spec.bgp.routeReflectorClusterID) and the BGPPeers. It never writes
// etcd keys itself.
//
// Running product: serve and the reconciler (etcdv3 mode), and the plan, verify and status commands
// call it.
package calicoetcd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/projectcalico/calico/libcalico-go/lib/apiconfig"
	"github.com/projectcalico/calico/libcalico-go/lib/clientv3"
	cerrors "github.com/projectcalico/calico/libcalico-go/lib/errors"
	"github.com/projectcalico/calico/libcalico-go/lib/options"
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

// Store is a Calico client on etcd.
type Store struct {
	client    clientv3.Interface
	cfg       Config
	endpoints string
	// Timeout bounds each call [10s].
	Timeout time.Duration

	registered registry // the Calico Nodes WatchChanges has seen
}

// New validates c and builds Calico's client. It does not wait for etcd: Check says whether it
// answers.
func New(c Config) (*Store, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	cfg := apiconfig.CalicoAPIConfig{Spec: apiconfig.CalicoAPIConfigSpec{
		DatastoreType: apiconfig.EtcdV3,
		EtcdConfig: apiconfig.EtcdConfig{
			EtcdEndpoints:  c.Endpoints,
			EtcdKeyFile:    c.KeyFile,
			EtcdCertFile:   c.CertFile,
			EtcdCACertFile: c.CACertFile,
		},
	}}
	cl, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd client for %s: %s", c.Endpoints, oneLine(err))
	}
	return &Store{client: cl, cfg: c, endpoints: c.Endpoints}, nil
}

// Client is Calico's client (tests read and write through it as calicoctl would).
func (s *Store) Client() clientv3.Interface { return s.client }

// Check reads one key from etcd and reports, in one line, why it failed (the readiness probe).
func (s *Store) Check(ctx context.Context) error {
	gctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err := s.client.BGPPeers().Get(gctx, "calico-rr-autoscaler-readiness-probe", options.GetOptions{})
	if err == nil || errors.As(err, new(cerrors.ErrorResourceDoesNotExist)) {
		return nil
	}
	// The client says little more than "context deadline exceeded": dial the endpoints
	// ourselves to name the cause (connection refused, an untrusted certificate, ...).
	if d := s.cfg.diagnose(ctx); d != nil {
		err = d
	}
	return fmt.Errorf("etcd at %s unreachable: %s", s.endpoints, oneLine(err))
}

// diagnose dials each endpoint (TLS with the configured files for https) and returns the first
// failure, or nil when every endpoint accepts the connection.
func (c Config) diagnose(ctx context.Context) error {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CACertFile != "" {
		pem, err := os.ReadFile(c.CACertFile)
		if err != nil {
			return err
		}
		tc.RootCAs = x509.NewCertPool()
		tc.RootCAs.AppendCertsFromPEM(pem)
	}
	if c.CertFile != "" {
		pair, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return err
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	for _, e := range strings.Split(c.Endpoints, ",") {
		u, err := url.Parse(strings.TrimSpace(e))
		if err != nil {
			return err
		}
		d := &net.Dialer{Timeout: 2 * time.Second}
		var conn net.Conn
		if u.Scheme == "https" {
			td := &tls.Dialer{NetDialer: d, Config: tc.Clone()}
			conn, err = td.DialContext(ctx, "tcp", u.Host)
		} else {
			conn, err = d.DialContext(ctx, "tcp", u.Host)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", u.Host, err)
		}
		conn.Close()
	}
	return nil
}

func (s *Store) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	d := s.Timeout
	if d <= 0 {
		d = 10 * time.Second
	}
	return context.WithTimeout(ctx, d)
}

// oneLine keeps the first line of an error.
func oneLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
