//go:build !slim

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

// etcdBuiltIn: this build has the etcd datastore (the slim build has not).
const etcdBuiltIn = true

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
