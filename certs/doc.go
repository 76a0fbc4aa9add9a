// Package certs manages the webhook's TLS without cert-manager (the chart's
// certManager.enabled=false): a private CA and a serving certificate kept in a
// Secret, written into the webhook server's certificate directory, renewed
// before they expire, and the CA injected into the caBundle of the product's
// webhook configurations.
//
// # Use
//
// The serve command binds the flags, then calls Setup before starting the
// manager:
//
//	var certOpts certs.Options
//	certOpts.BindFlags(fs) // --self-managed-certs, --cert-secret, --cert-service, ...
//	...
//	certOpts.CertDir = certDir // the value of --cert-dir
//	if certOpts.Enabled {
//		ready, err := certs.Setup(mgr, certOpts)
//		if err != nil { ... }
//		_ = mgr.AddReadyzCheck("certs", certs.Checker(ready))
//	}
//	webhookServer := webhook.NewServer(webhook.Options{
//		CertDir: certDir, TLSOpts: []func(*tls.Config){certs.TLSOpts}, ...})
//
// Setup returns only once a valid certificate is in Options.CertDir (creating
// the CA and the Secret on first use), so the webhook server, which the
// manager starts first and which loads its certificate when it starts, finds
// one. It then adds a Runnable (run by every replica, no leader election
// needed) that every Options.CheckInterval:
//
//   - renews the CA when less than a third of its validity is left, keeping
//     the previous CA in ca.crt (and so in the caBundle) until it expires, so
//     that replicas still serving a certificate of the old CA stay trusted;
//   - renews the serving certificate when less than a third of its validity
//     is left, when it was not signed by the current CA, or when its DNS
//     names no longer cover Options.DNSNames;
//   - sets the caBundle of every webhook of the named Mutating and Validating
//     webhook configurations to the Secret's ca.crt;
//   - writes tls.crt and tls.key into CertDir when they differ from the
//     Secret's (each file replaced atomically by a rename; controller-runtime's
//     certificate watcher picks the new pair up without a restart). After a
//     caBundle change it first waits Options.PropagationDelay, so that API
//     servers trust a new CA before a certificate signed by it is served.
//
// Replicas share the Secret: writes use optimistic concurrency (create, or
// update at the read resourceVersion), and a replica that loses a race reads
// the winner's certificate instead. The returned channel is closed after the
// first complete pass (files written, and the caBundle of every named
// configuration that exists up to date); configurations that do not exist yet
// are retried every few seconds.
//
// The Secret (type kubernetes.io/tls) holds ca.crt (the current CA first,
// then older CAs that are still valid), ca.key, tls.crt and tls.key. Keys are
// ECDSA P-256. TLSOpts makes a server accept TLS 1.2 or newer only.
//
// RBAC (the chart grants exactly this): in the Secret's namespace, create
// secrets and get/update/patch the named Secret; cluster-wide, get/update/patch
// the named mutating and validating webhook configurations.
package certs
