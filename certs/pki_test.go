package certs

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func testOptions() Options {
	return Options{
		Namespace: "rra-system", SecretName: "rra-tls", ServiceName: "rra", CertDir: "/tmp/certs",
		CAValidity: 90 * time.Hour, CertValidity: 9 * time.Hour,
	}.withDefaults()
}

// verify checks that the serving certificate of m is trusted by m's CA bundle
// for the Service's in-cluster name and matches its key.
func verify(t *testing.T, m material, now time.Time) *x509.Certificate {
	t.Helper()
	pair, err := tls.X509KeyPair(m.Cert, m.Key)
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	require.NoError(t, err)
	pool, err := CertPool(m.CABundle)
	require.NoError(t, err)
	_, err = leaf.Verify(x509.VerifyOptions{DNSName: "rra.rra-system.svc", Roots: pool, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	require.NoError(t, err)
	return leaf
}

func TestEnsureLifecycle(t *testing.T) {
	o := testOptions()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

	// Empty Secret: a CA and a serving certificate.
	m, ren, err := ensure(material{}, o, t0)
	require.NoError(t, err)
	require.True(t, ren.CA && ren.Cert, "%+v", ren)
	leaf := verify(t, m, t0)
	require.ElementsMatch(t, []string{"rra", "rra.rra-system", "rra.rra-system.svc", "rra.rra-system.svc.cluster.local"}, leaf.DNSNames)
	require.Equal(t, "rra.rra-system.svc", leaf.Subject.CommonName)
	require.Len(t, parseCerts(m.CABundle), 1)

	// Valid: nothing changes.
	m2, ren, err := ensure(m, o, t0.Add(5*time.Hour))
	require.NoError(t, err)
	require.False(t, ren.CA, "CA renewed")
	require.False(t, ren.Cert, "certificate renewed")
	require.True(t, m2.equal(m))

	// Less than a third of the serving certificate's life left: a new one
	// from the same CA.
	t1 := t0.Add(7 * time.Hour)
	m3, ren, err := ensure(m, o, t1)
	require.NoError(t, err)
	require.False(t, ren.CA)
	require.True(t, ren.Cert, "%+v", ren)
	require.Equal(t, m.CABundle, m3.CABundle)
	require.NotEqual(t, m.Cert, m3.Cert)
	verify(t, m3, t1)

	// Less than a third of the CA's life left: a new CA and a new serving
	// certificate; the old CA stays in the bundle, so a replica still serving
	// the old certificate stays trusted.
	t2 := t0.Add(61 * time.Hour)
	m4, ren, err := ensure(m3, o, t2)
	require.NoError(t, err)
	require.True(t, ren.CA && ren.Cert, "%+v", ren)
	cas := parseCerts(m4.CABundle)
	require.Len(t, cas, 2)
	require.True(t, cas[1].Equal(parseCerts(m3.CABundle)[0]), "old CA kept second")
	verify(t, m4, t2)
	old := m3
	old.CABundle = m4.CABundle
	verify(t, old, t1.Add(time.Hour))

	// Once the old CA has expired it leaves the bundle.
	t3 := t0.Add(91 * time.Hour)
	m5, _, err := ensure(m4, o, t3)
	require.NoError(t, err)
	require.Len(t, parseCerts(m5.CABundle), 1)
	verify(t, m5, t3)

	// A new DNS name re-issues the serving certificate only.
	o2 := o
	o2.ExtraDNSNames = []string{"webhook.example.com"}
	m6, ren, err := ensure(m5, o2, t3)
	require.NoError(t, err)
	require.True(t, ren.Cert && !ren.CA, "%+v", ren)
	require.Contains(t, verify(t, m6, t3).DNSNames, "webhook.example.com")
}

func TestEnsureRepairsGarbage(t *testing.T) {
	o := testOptions()
	now := time.Now()
	good, _, err := ensure(material{}, o, now)
	require.NoError(t, err)
	other, _, err := ensure(material{}, o, now)
	require.NoError(t, err)

	for name, m := range map[string]material{
		"garbage":             {CABundle: []byte("x"), CAKey: []byte("y"), Cert: []byte("z"), Key: []byte("w")},
		"ca key of another":   {CABundle: good.CABundle, CAKey: other.CAKey, Cert: good.Cert, Key: good.Key},
		"cert of another ca":  {CABundle: good.CABundle, CAKey: good.CAKey, Cert: other.Cert, Key: other.Key},
		"key of another cert": {CABundle: good.CABundle, CAKey: good.CAKey, Cert: good.Cert, Key: other.Key},
		"leaf as ca":          {CABundle: good.Cert, CAKey: good.Key, Cert: good.Cert, Key: good.Key},
	} {
		t.Run(name, func(t *testing.T) {
			fixed, ren, err := ensure(m, o, now)
			require.NoError(t, err)
			require.True(t, ren.Cert, "%+v", ren)
			verify(t, fixed, now)
		})
	}
}

func TestBindFlags(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "from-env")
	var o Options
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	o.BindFlags(fs)
	require.NoError(t, fs.Parse([]string{
		"--self-managed-certs", "--cert-secret=rra-tls", "--cert-service=rra",
		"--cert-mutating-webhooks=rra", "--cert-validating-webhooks=rra,other", "--cert-validating-webhooks=rra",
		"--cert-ca-validity=100h", "--cert-validity=10h", "--cert-extra-dns-names=a.example.com",
	}))
	o.CertDir = "/certs"
	require.True(t, o.Enabled)
	require.Equal(t, []string{"rra"}, o.MutatingWebhooks)
	require.Equal(t, []string{"rra", "other"}, o.ValidatingWebhooks)
	require.Equal(t, 100*time.Hour, o.CAValidity)
	require.NoError(t, o.Validate())
	require.Equal(t, []string{"rra", "rra.from-env", "rra.from-env.svc", "rra.from-env.svc.cluster.local", "a.example.com"}, o.DNSNames())

	bad := Options{CertDir: "relative", SecretName: "Bad_Name", CAValidity: time.Hour, CertValidity: 2 * time.Hour}
	t.Setenv("POD_NAMESPACE", "")
	err := bad.Validate()
	require.Error(t, err)
	for _, want := range []string{"namespace is required", "secret name", "service name", "must be absolute", "exceeds the CA"} {
		require.ErrorContains(t, err, want)
	}
}

func TestTLSOpts(t *testing.T) {
	c := &tls.Config{}
	TLSOpts(c)
	require.Equal(t, uint16(tls.VersionTLS12), c.MinVersion)
	c.MinVersion = tls.VersionTLS13
	TLSOpts(c)
	require.Equal(t, uint16(tls.VersionTLS13), c.MinVersion)
}
