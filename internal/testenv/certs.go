package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// servingCerts writes a fresh CA and a serving certificate for the
// apiserver on loopback into dir and returns the CA certificate (PEM).
func servingCerts(dir string) (caPEM []byte, certFile, keyFile string, err error) {
	return writeCerts(dir, "kube-apiserver", "apiserver.crt", "apiserver.key",
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")})
}

// WriteWebhookCert writes a fresh CA and a serving certificate for 127.0.0.1 and localhost into
// dir as tls.crt and tls.key (the layout of serve's --cert-dir) and returns the CA (PEM), for
// registering a webhook backend on loopback.
func WriteWebhookCert(dir string) ([]byte, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	caPEM, _, _, err := writeCerts(dir, "calico-rr-autoscaler", "tls.crt", "tls.key",
		[]string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")})
	return caPEM, err
}

// WriteServingCert writes a fresh CA and a serving certificate for dns names and 127.0.0.1 into
// dir as ca.crt, tls.crt and tls.key and returns the CA (PEM): the certificate of an aggregated API
// server the API server reaches as <service>.<namespace>.svc.
func WriteServingCert(dir string, dns ...string) ([]byte, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	caPEM, _, _, err := writeCerts(dir, "aggregated-apiserver", "tls.crt", "tls.key", dns, []net.IP{net.ParseIP("127.0.0.1")})
	return caPEM, err
}

// writeCerts writes a fresh CA (ca.crt) and a serving certificate signed by it into dir.
func writeCerts(dir, cn, certName, keyName string, dns []string, ips []net.IP) (caPEM []byte, certFile, keyFile string, err error) {
	return writeCertsFor(dir, cn, certName, keyName, dns, ips, x509.ExtKeyUsageServerAuth)
}

// frontProxyCerts writes the aggregation layer's front-proxy CA (front-proxy-ca.crt, in a
// directory of its own) and the client certificate kube-apiserver proxies with (CN
// FrontProxyClient).
func frontProxyCerts(dir string) (caFile, certFile, keyFile string, err error) {
	d := filepath.Join(dir, "front-proxy")
	if err := os.MkdirAll(d, 0o700); err != nil {
		return "", "", "", err
	}
	_, certFile, keyFile, err = writeCertsFor(d, FrontProxyClient, "client.crt", "client.key", nil, nil, x509.ExtKeyUsageClientAuth)
	return filepath.Join(d, "ca.crt"), certFile, keyFile, err
}

// FrontProxyClient is the CN of the client certificate kube-apiserver proxies aggregated requests
// with (WithAggregation): aggregated API servers trust only this name for the X-Remote-* headers.
const FrontProxyClient = "front-proxy-client"

func writeCertsFor(dir, cn, certName, keyName string, dns []string, ips []net.IP, usage x509.ExtKeyUsage) (caPEM []byte, certFile, keyFile string, err error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, "", "", err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "rra-testenv-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, "", "", err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, "", "", err
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, "", "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, "", "", err
	}
	caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM, err := ecKeyPEM(key)
	if err != nil {
		return nil, "", "", err
	}
	certFile = filepath.Join(dir, certName)
	keyFile = filepath.Join(dir, keyName)
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), caPEM, 0o600); err != nil {
		return nil, "", "", err
	}
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		return nil, "", "", err
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return nil, "", "", err
	}
	return caPEM, certFile, keyFile, nil
}

// serviceAccountKey writes an ECDSA key pair for signing service account
// tokens and returns the private and public key file paths.
func serviceAccountKey(dir string) (keyFile, pubFile string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	keyPEM, err := ecKeyPEM(key)
	if err != nil {
		return "", "", err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return "", "", err
	}
	keyFile = filepath.Join(dir, "sa.key")
	pubFile = filepath.Join(dir, "sa.pub")
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(pubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o600); err != nil {
		return "", "", err
	}
	return keyFile, pubFile, nil
}

func ecKeyPEM(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func randomToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random token: %w", err)
	}
	return hex.EncodeToString(b), nil
}
