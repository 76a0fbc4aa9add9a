package certs

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Defaults of Options.
const (
	DefaultCAValidity    = 5 * 365 * 24 * time.Hour
	DefaultCertValidity  = 365 * 24 * time.Hour
	DefaultCheckInterval = time.Minute
	DefaultRetryInterval = 2 * time.Second
	DefaultClusterDomain = "cluster.local"
	DefaultCertName      = "tls.crt"
	DefaultKeyName       = "tls.key"
	// CACertKey and CAKeyKey are the Secret's keys of the CA bundle and the
	// current CA's key.
	CACertKey = "ca.crt"
	CAKeyKey  = "ca.key"
)

// Options configure the self-managed certificates.
type Options struct {
	// Enabled is --self-managed-certs: the caller runs Setup only when it is set.
	Enabled bool
	// Namespace of the Secret and the Service [$POD_NAMESPACE].
	Namespace string
	// SecretName is the Secret that holds the CA and the serving certificate.
	SecretName string
	// ServiceName is the webhook Service; the certificate is valid for
	// <svc>, <svc>.<ns>, <svc>.<ns>.svc and <svc>.<ns>.svc.<ClusterDomain>.
	ServiceName string
	// ClusterDomain [cluster.local].
	ClusterDomain string
	// ExtraDNSNames are added to the certificate's DNS names.
	ExtraDNSNames []string
	// CertDir is where tls.crt and tls.key are written (the serve command's --cert-dir).
	CertDir string
	// CertName and KeyName are the file names in CertDir [tls.crt, tls.key].
	CertName, KeyName string
	// MutatingWebhooks and ValidatingWebhooks name the webhook configurations
	// whose caBundle is kept current.
	MutatingWebhooks, ValidatingWebhooks []string
	// CAValidity is the CA's lifetime [5 years]; it is renewed with a third left.
	CAValidity time.Duration
	// CertValidity is the serving certificate's lifetime [1 year]; it is
	// renewed with a third left.
	CertValidity time.Duration
	// CheckInterval is the time between two passes [1m].
	CheckInterval time.Duration
	// RetryInterval is the time before the next pass after an incomplete one
	// (an error, or a webhook configuration that does not exist yet) [2s].
	RetryInterval time.Duration
	// PropagationDelay is the wait between injecting a new CA into the
	// caBundles and serving a certificate signed by it [3s].
	PropagationDelay time.Duration
	// BootstrapTimeout bounds Setup's first pass [30s].
	BootstrapTimeout time.Duration
	// Organization is the certificates' subject organization [calico-rr-autoscaler].
	Organization string

	// now is the clock (tests).
	now func() time.Time
}

// BindFlags binds the options to flags of fs (all but CertDir, which is the
// serve command's --cert-dir). The chart passes these flags when
// certManager.enabled is false.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.BoolVar(&o.Enabled, "self-managed-certs", o.Enabled,
		"Manage the webhook's CA and serving certificate in a Secret instead of using files placed in --cert-dir by cert-manager.")
	fs.StringVar(&o.Namespace, "cert-namespace", o.Namespace,
		"Namespace of the certificate Secret and the webhook Service (default $POD_NAMESPACE).")
	fs.StringVar(&o.SecretName, "cert-secret", o.SecretName,
		"Secret holding the self-managed CA and serving certificate.")
	fs.StringVar(&o.ServiceName, "cert-service", o.ServiceName,
		"Webhook Service whose DNS names the serving certificate covers.")
	fs.StringVar(&o.ClusterDomain, "cert-cluster-domain", DefaultClusterDomain, "Cluster DNS domain.")
	fs.Var((*listFlag)(&o.ExtraDNSNames), "cert-extra-dns-names", "Extra DNS names of the serving certificate (comma-separated).")
	fs.Var((*listFlag)(&o.MutatingWebhooks), "cert-mutating-webhooks",
		"MutatingWebhookConfigurations whose caBundle is kept current (comma-separated).")
	fs.Var((*listFlag)(&o.ValidatingWebhooks), "cert-validating-webhooks",
		"ValidatingWebhookConfigurations whose caBundle is kept current (comma-separated).")
	fs.DurationVar(&o.CAValidity, "cert-ca-validity", DefaultCAValidity, "Validity of the self-managed CA.")
	fs.DurationVar(&o.CertValidity, "cert-validity", DefaultCertValidity, "Validity of the self-managed serving certificate.")
}

type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error {
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" && !slices.Contains(*l, v) {
			*l = append(*l, v)
		}
	}
	return nil
}

// DNSNames are the names the serving certificate is valid for.
func (o Options) DNSNames() []string {
	o = o.withDefaults()
	var names []string
	if o.ServiceName != "" {
		svc, ns := o.ServiceName, o.Namespace
		names = append(names, svc, svc+"."+ns, svc+"."+ns+".svc", svc+"."+ns+".svc."+o.ClusterDomain)
	}
	for _, n := range o.ExtraDNSNames {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names
}

func (o Options) withDefaults() Options {
	if o.Namespace == "" {
		o.Namespace = os.Getenv("POD_NAMESPACE")
	}
	if o.ClusterDomain == "" {
		o.ClusterDomain = DefaultClusterDomain
	}
	if o.CertName == "" {
		o.CertName = DefaultCertName
	}
	if o.KeyName == "" {
		o.KeyName = DefaultKeyName
	}
	if o.CAValidity == 0 {
		o.CAValidity = DefaultCAValidity
	}
	if o.CertValidity == 0 {
		o.CertValidity = DefaultCertValidity
	}
	if o.CheckInterval == 0 {
		o.CheckInterval = DefaultCheckInterval
	}
	if o.RetryInterval == 0 {
		o.RetryInterval = DefaultRetryInterval
	}
	if o.PropagationDelay == 0 {
		o.PropagationDelay = 3 * time.Second
	}
	if o.BootstrapTimeout == 0 {
		o.BootstrapTimeout = 30 * time.Second
	}
	if o.Organization == "" {
		o.Organization = "calico-rr-autoscaler"
	}
	if o.now == nil {
		o.now = time.Now
	}
	return o
}

// Validate reports missing or invalid options (after defaults).
func (o Options) Validate() error {
	o = o.withDefaults()
	var errs []error
	if o.Namespace == "" {
		errs = append(errs, errors.New("namespace is required (--cert-namespace or $POD_NAMESPACE)"))
	}
	if o.SecretName == "" {
		errs = append(errs, errors.New("secret name is required (--cert-secret)"))
	} else if msgs := validation.IsDNS1123Subdomain(o.SecretName); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("secret name %q: %s", o.SecretName, strings.Join(msgs, "; ")))
	}
	if len(o.DNSNames()) == 0 {
		errs = append(errs, errors.New("a service name (--cert-service) or extra DNS names are required"))
	}
	for _, n := range o.DNSNames() {
		if msgs := validation.IsDNS1123Subdomain(n); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("DNS name %q: %s", n, strings.Join(msgs, "; ")))
		}
	}
	if o.CertDir == "" {
		errs = append(errs, errors.New("certificate directory is required (--cert-dir)"))
	} else if !filepath.IsAbs(o.CertDir) {
		errs = append(errs, fmt.Errorf("certificate directory %q must be absolute", o.CertDir))
	}
	if o.CAValidity < time.Second || o.CertValidity < time.Second {
		errs = append(errs, errors.New("validities must be at least one second"))
	}
	if o.CertValidity > o.CAValidity {
		errs = append(errs, fmt.Errorf("certificate validity %s exceeds the CA's %s", o.CertValidity, o.CAValidity))
	}
	if o.CheckInterval < 0 || o.RetryInterval < 0 {
		errs = append(errs, errors.New("intervals must not be negative"))
	}
	return errors.Join(errs...)
}

// TLSOpts makes a server accept TLS 1.2 or newer only; use it in
// webhook.Options.TLSOpts.
func TLSOpts(c *tls.Config) {
	if c.MinVersion < tls.VersionTLS12 {
		c.MinVersion = tls.VersionTLS12
	}
}
