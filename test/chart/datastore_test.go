package chart

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/image"
)

// TestRenderEtcdDatastore: datastore.type etcdv3 runs the image's full binary (the slim
// entrypoint has no etcd datastore), passes --datastore and --etcd-endpoints, and with a tlsSecret
// mounts the Secret's etcd-key, etcd-cert and etcd-ca read-only where the --etcd-*-file flags point;
// the default runs the entrypoint and passes none of them.
func TestRenderEtcdDatastore(t *testing.T) {
	for _, tc := range []struct {
		name, values                    string
		datastore, endpoints, secret    string
		keyFile, certFile, caFile, none string
	}{
		{name: "default", values: ``, datastore: "kubernetes"},
		{name: "etcd with TLS", values: `datastore: {type: etcdv3, etcd: {endpoints: "https://10.0.0.1:2379,https://10.0.0.2:2379", tlsSecret: calico-etcd-secrets}}`,
			datastore: "etcdv3", endpoints: "https://10.0.0.1:2379,https://10.0.0.2:2379", secret: "calico-etcd-secrets",
			keyFile: "/calico-secrets/etcd-key", certFile: "/calico-secrets/etcd-cert", caFile: "/calico-secrets/etcd-ca"},
		{name: "etcd over http", values: `datastore: {type: etcdv3, etcd: {endpoints: "http://10.0.0.1:2379"}}`,
			datastore: "etcdv3", endpoints: "http://10.0.0.1:2379"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := render(t, valuesYAML(t, tc.values))
			dep := typed[appsv1.Deployment](t, r.get(t, "Deployment", "calico-rr-autoscaler"))
			pod := dep.Spec.Template.Spec
			c := pod.Containers[0]
			fs, _ := serveFlags()
			require.NoError(t, fs.Parse(c.Args[1:]), "args %v", c.Args)
			require.Equal(t, tc.datastore, fs.Lookup("datastore").Value.String())
			if tc.datastore == "etcdv3" {
				require.Equal(t, []string{image.FullBinary}, c.Command)
			} else {
				require.Empty(t, c.Command, "the image's entrypoint, the slim build")
			}
			require.Equal(t, tc.endpoints, fs.Lookup("etcd-endpoints").Value.String())
			files := map[string]string{"etcd-key-file": tc.keyFile, "etcd-cert-file": tc.certFile, "etcd-ca-cert-file": tc.caFile}
			for flag, want := range files {
				require.Equal(t, want, fs.Lookup(flag).Value.String(), flag)
			}
			var secret, mount string
			for _, v := range pod.Volumes {
				if v.Name == "etcd-certs" {
					require.NotNil(t, v.Secret)
					secret = v.Secret.SecretName
					require.EqualValues(t, 0o400, *v.Secret.DefaultMode)
					var keys []string
					for _, it := range v.Secret.Items {
						keys = append(keys, it.Key+"="+it.Path)
					}
					require.Equal(t, []string{"etcd-key=etcd-key", "etcd-cert=etcd-cert", "etcd-ca=etcd-ca"}, keys)
				}
			}
			for _, m := range c.VolumeMounts {
				if m.Name == "etcd-certs" {
					require.True(t, m.ReadOnly)
					mount = m.MountPath
				}
			}
			require.Equal(t, tc.secret, secret)
			if tc.secret == "" {
				require.Empty(t, mount)
				return
			}
			for flag, f := range files {
				require.Equal(t, mount, filepath.Dir(f), "%s is in the mounted Secret", flag)
			}
		})
	}
}

func TestEtcdDatastoreValues(t *testing.T) {
	for _, tc := range []struct{ values, want string }{
		{`datastore: {type: etcd}`, "/datastore/type"},
		{`datastore: {type: etcdv3}`, "datastore.etcd.endpoints is required with datastore.type etcdv3"},
		{`datastore: {type: etcdv3, etcd: {endpoints: "10.0.0.1:2379"}}`, "/datastore/etcd/endpoints"},
		{`datastore: {etcd: {tlsSecret: Bad_Name}}`, "/datastore/etcd/tlsSecret"},
		{`datastore: {etcd: {caFile: x}}`, "additional properties 'caFile'"},
	} {
		t.Run(tc.values, func(t *testing.T) {
			_, err := renderErr(t, releaseNamespace, valuesYAML(t, tc.values))
			require.Error(t, err)
			require.True(t, strings.Contains(err.Error(), tc.want), "%v", err)
		})
	}
}
