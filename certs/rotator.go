package certs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	certExpiry = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "calico_rr_autoscaler_webhook_certificate_expiry_timestamp_seconds",
		Help: "When the self-managed webhook certificates expire (Unix time), by kind (ca, serving).",
	}, []string{"kind"})
	renewals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "calico_rr_autoscaler_webhook_certificate_renewals_total",
		Help: "Self-managed webhook certificates renewed by this replica, by kind (ca, serving).",
	}, []string{"kind"})
	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() {
		crmetrics.Registry.MustRegister(certExpiry, renewals)
	})
}

// Rotator keeps the Secret, the files in CertDir and the caBundles current.
// Setup creates one and adds it to a manager; New and Start run one without a
// manager.
type Rotator struct {
	opts   Options
	client kubernetes.Interface
	log    logr.Logger

	readyOnce sync.Once
	ready     chan struct{}
}

var (
	_ manager.Runnable               = (*Rotator)(nil)
	_ manager.LeaderElectionRunnable = (*Rotator)(nil)
)

// Setup validates opts, writes a valid certificate into opts.CertDir (creating
// or renewing the CA, the serving certificate and the Secret as needed,
// retrying for up to opts.BootstrapTimeout) and adds a Rotator to mgr that
// keeps everything current. The channel is closed after the first complete
// pass (see the package documentation).
func Setup(mgr manager.Manager, opts Options) (<-chan struct{}, error) {
	r, err := New(mgr.GetConfig(), opts)
	if err != nil {
		return nil, err
	}
	r.log = mgr.GetLogger().WithName("certs")
	if err := r.Bootstrap(context.Background()); err != nil {
		return nil, err
	}
	if err := mgr.Add(r); err != nil {
		return nil, err
	}
	return r.Ready(), nil
}

// New returns a Rotator that talks to the API server of cfg (uncached: it
// reads one Secret and a few webhook configurations per pass).
func New(cfg *rest.Config, opts Options) (*Rotator, error) {
	opts = opts.withDefaults()
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("self-managed certificates: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
	if cfg.UserAgent == "" {
		cfg.UserAgent = "calico-rr-autoscaler/certs"
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	registerMetrics()
	return &Rotator{opts: opts, client: cs, log: ctrllog.Log.WithName("certs"), ready: make(chan struct{})}, nil
}

// Ready is closed after the first complete pass.
func (r *Rotator) Ready() <-chan struct{} { return r.ready }

// NeedLeaderElection is false: every replica keeps its own files current.
func (r *Rotator) NeedLeaderElection() bool { return false }

// Bootstrap runs passes until the certificate files are in place, for up to
// BootstrapTimeout. Webhook configurations that cannot be updated yet do not
// fail it.
func (r *Rotator) Bootstrap(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.opts.BootstrapTimeout)
	defer cancel()
	for {
		_, injectErr, err := r.pass(ctx)
		if err == nil {
			if injectErr != nil {
				r.log.Info("webhook configurations not updated yet", "error", injectErr.Error())
			}
			return nil
		}
		r.log.Info("waiting for the webhook certificate", "error", err.Error())
		select {
		case <-ctx.Done():
			return fmt.Errorf("self-managed certificates: %w", err)
		case <-time.After(r.opts.RetryInterval):
		}
	}
}

// Start runs passes until ctx ends.
func (r *Rotator) Start(ctx context.Context) error {
	r.log.Info("keeping the webhook certificate current", "secret", r.opts.Namespace+"/"+r.opts.SecretName,
		"dnsNames", r.opts.DNSNames(), "certDir", r.opts.CertDir)
	for {
		wait := r.opts.CheckInterval
		if complete, err := r.Sync(ctx); err != nil || !complete {
			if err != nil && ctx.Err() == nil {
				r.log.Error(err, "webhook certificate pass failed")
			}
			wait = r.opts.RetryInterval
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// Sync runs one pass: Secret, caBundles, files. complete is false when a
// named webhook configuration does not exist (yet).
func (r *Rotator) Sync(ctx context.Context) (complete bool, err error) {
	complete, injectErr, err := r.pass(ctx)
	if err == nil {
		err = injectErr
	}
	if err == nil && complete {
		r.readyOnce.Do(func() { close(r.ready) })
	}
	return complete && err == nil, err
}

// pass brings the Secret up to date, then the caBundles, then the files: a
// replica injects a new CA before it serves a certificate signed by it, and
// waits PropagationDelay in between so that API servers see the new caBundle
// first. err is about the Secret and the files, injectErr about the
// webhook configurations.
func (r *Rotator) pass(ctx context.Context) (complete bool, injectErr, err error) {
	m, err := r.syncSecret(ctx)
	if err != nil {
		return false, nil, err
	}
	complete, changed, injectErr := r.injectCABundle(ctx, m.CABundle)
	if changed && r.filesDiffer(m) && r.filesExist() {
		select {
		case <-ctx.Done():
			return false, injectErr, ctx.Err()
		case <-time.After(r.opts.PropagationDelay):
		}
	}
	if err := r.writeFiles(m); err != nil {
		return false, injectErr, err
	}
	r.observe(m)
	return complete, injectErr, nil
}

// syncSecret reads the Secret, renews what needs renewing and writes it back
// (create, or update at the read resourceVersion; a lost race re-reads).
func (r *Rotator) syncSecret(ctx context.Context) (material, error) {
	secrets := r.client.CoreV1().Secrets(r.opts.Namespace)
	for attempt := 0; ; attempt++ {
		sec, err := secrets.Get(ctx, r.opts.SecretName, metav1.GetOptions{})
		notFound := apierrors.IsNotFound(err)
		if err != nil && !notFound {
			return material{}, fmt.Errorf("reading Secret %s/%s: %w", r.opts.Namespace, r.opts.SecretName, err)
		}
		var cur material
		if !notFound {
			cur = material{CABundle: sec.Data[CACertKey], CAKey: sec.Data[CAKeyKey], Cert: sec.Data[corev1.TLSCertKey], Key: sec.Data[corev1.TLSPrivateKeyKey]}
		}
		want, ren, err := ensure(cur, r.opts, r.opts.now())
		if err != nil {
			return material{}, err
		}
		if !notFound && want.equal(cur) {
			return cur, nil
		}
		data := map[string][]byte{CACertKey: want.CABundle, CAKeyKey: want.CAKey,
			corev1.TLSCertKey: want.Cert, corev1.TLSPrivateKeyKey: want.Key}
		if notFound {
			sec = &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: r.opts.SecretName, Namespace: r.opts.Namespace,
					Labels: map[string]string{"app.kubernetes.io/managed-by": "calico-rr-autoscaler"}},
				Type: corev1.SecretTypeTLS,
				Data: data,
			}
			_, err = secrets.Create(ctx, sec, metav1.CreateOptions{})
		} else {
			sec = sec.DeepCopy()
			if sec.Type != corev1.SecretTypeTLS && sec.Type != corev1.SecretTypeOpaque && sec.Type != "" {
				return material{}, fmt.Errorf("Secret %s/%s has type %s, want %s", r.opts.Namespace, r.opts.SecretName, sec.Type, corev1.SecretTypeTLS)
			}
			if sec.Data == nil {
				sec.Data = map[string][]byte{}
			}
			for k, v := range data {
				sec.Data[k] = v
			}
			_, err = secrets.Update(ctx, sec, metav1.UpdateOptions{})
		}
		switch {
		case err == nil:
			r.logRenewal(ren)
			return want, nil
		case (apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)) && attempt < 5:
			continue // another replica won: use its certificate
		default:
			return material{}, fmt.Errorf("writing Secret %s/%s: %w", r.opts.Namespace, r.opts.SecretName, err)
		}
	}
}

func (r *Rotator) logRenewal(ren renewal) {
	if ren.CA {
		renewals.WithLabelValues("ca").Inc()
		r.log.Info("created a new webhook CA", "reason", ren.CAReason)
	}
	if ren.Cert {
		renewals.WithLabelValues("serving").Inc()
		r.log.Info("issued a new webhook serving certificate", "reason", ren.CertReason)
	}
}

func (r *Rotator) observe(m material) {
	if cas := parseCerts(m.CABundle); len(cas) > 0 {
		certExpiry.WithLabelValues("ca").Set(float64(cas[0].NotAfter.Unix()))
	}
	if c := parseCerts(m.Cert); len(c) > 0 {
		certExpiry.WithLabelValues("serving").Set(float64(c[0].NotAfter.Unix()))
	}
}

func (r *Rotator) filesDiffer(m material) bool {
	for name, want := range map[string][]byte{r.opts.CertName: m.Cert, r.opts.KeyName: m.Key} {
		if cur, err := os.ReadFile(filepath.Join(r.opts.CertDir, name)); err != nil || !bytes.Equal(cur, want) {
			return true
		}
	}
	return false
}

func (r *Rotator) filesExist() bool {
	_, err := os.Stat(filepath.Join(r.opts.CertDir, r.opts.CertName))
	return err == nil
}

// writeFiles replaces tls.crt and tls.key in CertDir when they differ.
func (r *Rotator) writeFiles(m material) error {
	if err := os.MkdirAll(r.opts.CertDir, 0o700); err != nil {
		return err
	}
	changed := false
	// The key first: a watcher that reads between the two renames sees a
	// mismatched pair, fails, and reads again on the second rename.
	for _, f := range []struct {
		name string
		data []byte
	}{{r.opts.KeyName, m.Key}, {r.opts.CertName, m.Cert}} {
		p := filepath.Join(r.opts.CertDir, f.name)
		if cur, err := os.ReadFile(p); err == nil && bytes.Equal(cur, f.data) {
			continue
		}
		if err := writeAtomic(p, f.data); err != nil {
			return err
		}
		changed = true
	}
	if changed {
		r.log.Info("wrote the webhook serving certificate", "dir", r.opts.CertDir)
	}
	return nil
}

func writeAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// injectCABundle sets the caBundle of every webhook of the named
// configurations. complete is false when one does not exist; changed is true
// when one was updated.
func (r *Rotator) injectCABundle(ctx context.Context, bundle []byte) (complete, changed bool, err error) {
	complete = true
	var errs []error
	record := func(kind, name string, found, updated bool, err error) {
		complete, changed = complete && found, changed || updated
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", kind, name, err))
		} else if !found {
			r.log.Info("webhook configuration not found (yet)", "kind", kind, "name", name)
		}
	}
	mut := r.client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	for _, name := range r.opts.MutatingWebhooks {
		found, updated, err := setBundles(ctx, name, bundle, mut.Get, mut.Update,
			func(c *admissionregistrationv1.MutatingWebhookConfiguration) (out []*admissionregistrationv1.WebhookClientConfig) {
				for i := range c.Webhooks {
					out = append(out, &c.Webhooks[i].ClientConfig)
				}
				return out
			})
		record("MutatingWebhookConfiguration", name, found, updated, err)
	}
	val := r.client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	for _, name := range r.opts.ValidatingWebhooks {
		found, updated, err := setBundles(ctx, name, bundle, val.Get, val.Update,
			func(c *admissionregistrationv1.ValidatingWebhookConfiguration) (out []*admissionregistrationv1.WebhookClientConfig) {
				for i := range c.Webhooks {
					out = append(out, &c.Webhooks[i].ClientConfig)
				}
				return out
			})
		record("ValidatingWebhookConfiguration", name, found, updated, err)
	}
	return complete && len(errs) == 0, changed, errors.Join(errs...)
}

func setBundle(cc *admissionregistrationv1.WebhookClientConfig, bundle []byte) bool {
	if bytes.Equal(cc.CABundle, bundle) {
		return false
	}
	cc.CABundle = bytes.Clone(bundle)
	return true
}

// setBundles gets the named webhook configuration, sets the caBundle of each of its webhooks
// client configurations and updates it when that changed anything, retrying on conflicts. found
// is false when it does not exist.
func setBundles[T any](ctx context.Context, name string, bundle []byte,
	get func(context.Context, string, metav1.GetOptions) (T, error),
	update func(context.Context, T, metav1.UpdateOptions) (T, error),
	clientConfigs func(T) []*admissionregistrationv1.WebhookClientConfig) (found, updated bool, err error) {
	for attempt := 0; ; attempt++ {
		c, err := get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, false, nil
		}
		if err != nil {
			return true, false, err
		}
		changed := false
		for _, cc := range clientConfigs(c) {
			changed = setBundle(cc, bundle) || changed
		}
		if !changed {
			return true, false, nil
		}
		_, err = update(ctx, c, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) && attempt < 5 {
			continue
		}
		return true, err == nil, err
	}
}

// Checker is a readiness check that fails until ready is closed.
func Checker(ready <-chan struct{}) healthz.Checker {
	return func(*http.Request) error {
		select {
		case <-ready:
			return nil
		default:
			return errors.New("webhook certificate not in place yet")
		}
	}
}
