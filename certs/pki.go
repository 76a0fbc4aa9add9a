package certs

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"time"
)

// clockSkew backdates NotBefore so that a certificate is valid on a peer
// whose clock is slightly behind.
const clockSkew = 5 * time.Minute

// material is the content of the Secret.
type material struct {
	CABundle []byte // ca.crt: current CA first, then older still-valid CAs
	CAKey    []byte // ca.key: the current CA's key
	Cert     []byte // tls.crt
	Key      []byte // tls.key
}

func (m material) equal(o material) bool {
	return bytes.Equal(m.CABundle, o.CABundle) && bytes.Equal(m.CAKey, o.CAKey) &&
		bytes.Equal(m.Cert, o.Cert) && bytes.Equal(m.Key, o.Key)
}

// renewal says what was renewed, for logs.
type renewal struct {
	CA, Cert bool
	// Reason of the renewal of each.
	CAReason, CertReason string
}

// ensure returns material that is valid at now for opts: m itself when it
// is, else m with the CA and/or the serving certificate renewed.
func ensure(m material, o Options, now time.Time) (material, renewal, error) {
	var r renewal
	cas, caKey, reason := currentCA(m, now, o.CAValidity)
	if reason != "" {
		var err error
		cas, caKey, err = newCA(o, now, cas)
		if err != nil {
			return m, r, err
		}
		r.CA, r.CAReason = true, reason
	}
	// Drop expired CAs from the bundle (never the current one).
	bundle := []*x509.Certificate{cas[0]}
	for _, c := range cas[1:] {
		if now.Before(c.NotAfter) {
			bundle = append(bundle, c)
		}
	}
	out := material{CABundle: encodeCerts(bundle), CAKey: m.CAKey, Cert: m.Cert, Key: m.Key}
	if r.CA {
		kb, err := encodeKey(caKey)
		if err != nil {
			return m, r, err
		}
		out.CAKey = kb
	}
	if reason := certNeedsRenewal(m.Cert, m.Key, cas[0], o.DNSNames(), now, o.CertValidity); r.CA || reason != "" {
		if r.CA {
			reason = "new CA"
		}
		cert, key, err := newServingCert(o, now, cas[0], caKey)
		if err != nil {
			return m, r, err
		}
		out.Cert, out.Key = cert, key
		r.Cert, r.CertReason = true, reason
	}
	return out, r, nil
}

// currentCA parses the Secret's CA; reason is non-empty when a new CA is
// needed. cas is every parseable CA of the bundle (current first); on a
// non-empty reason it holds the ones to keep after the new CA.
func currentCA(m material, now time.Time, validity time.Duration) (cas []*x509.Certificate, key crypto.Signer, reason string) {
	cas = parseCerts(m.CABundle)
	if len(cas) == 0 {
		return nil, nil, "no CA"
	}
	key, err := parseKey(m.CAKey)
	if err != nil {
		return cas, nil, "unreadable CA key: " + err.Error()
	}
	ca := cas[0]
	switch {
	case !ca.IsCA || !ca.BasicConstraintsValid:
		return cas[1:], nil, "ca.crt is not a CA"
	case !publicKeysEqual(ca.PublicKey, key.Public()):
		return cas, nil, "CA key does not match the CA"
	case !now.Before(ca.NotAfter.Add(-validity / 3)):
		return cas, nil, fmt.Sprintf("CA expires at %s", ca.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(ca.NotBefore):
		return cas, nil, "CA not valid yet"
	}
	return cas, key, ""
}

// certNeedsRenewal returns why the serving certificate must be renewed, or "".
func certNeedsRenewal(certPEM, keyPEM []byte, ca *x509.Certificate, dnsNames []string, now time.Time, validity time.Duration) string {
	if len(certPEM) == 0 || len(keyPEM) == 0 {
		return "no serving certificate"
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return "unreadable serving certificate: " + err.Error()
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return "unreadable serving certificate: " + err.Error()
	}
	if err := cert.CheckSignatureFrom(ca); err != nil {
		return "not signed by the current CA"
	}
	for _, n := range dnsNames {
		if cert.VerifyHostname(n) != nil {
			return "does not cover " + n
		}
	}
	if now.Before(cert.NotBefore) {
		return "not valid yet"
	}
	// Renew with a third of the validity left, or a third of the
	// certificate's own lifetime when it was issued shorter (capped by the CA).
	life := cert.NotAfter.Sub(cert.NotBefore) - clockSkew
	if life > validity || life <= 0 {
		life = validity
	}
	if !now.Before(cert.NotAfter.Add(-life / 3)) {
		return fmt.Sprintf("expires at %s", cert.NotAfter.UTC().Format(time.RFC3339))
	}
	return ""
}

// newKey returns a new P-256 key and a serial number for its certificate.
func newKey() (*ecdsa.PrivateKey, *big.Int, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, err
	}
	return key, serial, nil
}

// newCA returns a new CA followed by the still-valid older CAs.
func newCA(o Options, now time.Time, older []*x509.Certificate) ([]*x509.Certificate, crypto.Signer, error) {
	key, serial, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	cn := o.ServiceName
	if cn == "" {
		cn = o.SecretName
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn + "-ca@" + now.UTC().Format("20060102T150405Z"), Organization: []string{o.Organization}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(o.CAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, err
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	cas := []*x509.Certificate{ca}
	for _, c := range older {
		if c.IsCA && now.Before(c.NotAfter) && !c.Equal(ca) {
			cas = append(cas, c)
		}
	}
	return cas, key, nil
}

func newServingCert(o Options, now time.Time, ca *x509.Certificate, caKey crypto.Signer) (certPEM, keyPEM []byte, err error) {
	names := o.DNSNames()
	if len(names) == 0 {
		return nil, nil, errors.New("no DNS names")
	}
	key, serial, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	notAfter := now.Add(o.CertValidity)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	cn := names[0]
	if len(names) > 2 {
		cn = names[2] // <svc>.<ns>.svc, what the API server asks for
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn, Organization: []string{o.Organization}},
		DNSNames:     slices.Clone(names),
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return nil, nil, err
	}
	kb, err := encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), kb, nil
}

func serialNumber() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func encodeCerts(certs []*x509.Certificate) []byte {
	var b bytes.Buffer
	for _, c := range certs {
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return b.Bytes()
}

func encodeKey(k crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func parseCerts(b []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return out
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		if c, err := x509.ParseCertificate(blk.Bytes); err == nil {
			out = append(out, c)
		}
	}
}

func parseKey(b []byte) (crypto.Signer, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, errors.New("no PEM block")
	}
	var k any
	var err error
	switch blk.Type {
	case "PRIVATE KEY":
		k, err = x509.ParsePKCS8PrivateKey(blk.Bytes)
	case "EC PRIVATE KEY":
		k, err = x509.ParseECPrivateKey(blk.Bytes)
	case "RSA PRIVATE KEY":
		k, err = x509.ParsePKCS1PrivateKey(blk.Bytes)
	default:
		return nil, fmt.Errorf("unexpected PEM block %q", blk.Type)
	}
	if err != nil {
		return nil, err
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("key of type %T cannot sign", k)
	}
	return s, nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	ae, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && ae.Equal(b)
}

// CertPool is a pool of the PEM certificates in bundle (a Secret's ca.crt).
func CertPool(bundle []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) {
		return nil, errors.New("no certificate in the CA bundle")
	}
	return pool, nil
}
