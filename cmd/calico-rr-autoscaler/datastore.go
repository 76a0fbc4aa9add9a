package main

import (
	"errors"
	"flag"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calicoetcd"
)

// datastoreFlags are the flags serve, plan and verify share to reach Calico's datastore: the
// Kubernetes API, or etcd with the flags Calico's own clients take (calicoctl's ETCD_ENDPOINTS,
// ETCD_KEY_FILE, ETCD_CERT_FILE, ETCD_CA_CERT_FILE).
type datastoreFlags struct {
	datastore string
	etcd      calicoetcd.Config
}

func (d *datastoreFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&d.datastore, "datastore", calicoetcd.Kubernetes, "Calico's datastore: kubernetes (Calico's resources in the Kubernetes API) or etcdv3 (Calico Nodes and BGPPeers in etcd)")
	fs.StringVar(&d.etcd.Endpoints, "etcd-endpoints", "", "with --datastore etcdv3: Calico's etcd, comma-separated URLs (ETCD_ENDPOINTS)")
	fs.StringVar(&d.etcd.KeyFile, "etcd-key-file", "", "with --datastore etcdv3: the etcd client key (ETCD_KEY_FILE)")
	fs.StringVar(&d.etcd.CertFile, "etcd-cert-file", "", "with --datastore etcdv3: the etcd client certificate (ETCD_CERT_FILE)")
	fs.StringVar(&d.etcd.CACertFile, "etcd-ca-cert-file", "", "with --datastore etcdv3: the CA certificate of etcd's serving certificate (ETCD_CA_CERT_FILE)")
}

// check validates the flags: the datastore's name and, for etcdv3, the endpoints and TLS files
// (one line naming the flag).
func (d *datastoreFlags) check() (etcd bool, err error) {
	ds, err := calicoetcd.ParseDatastore(d.datastore)
	if err != nil {
		return false, usageError{err}
	}
	if ds != calicoetcd.EtcdV3 {
		if d.etcd != (calicoetcd.Config{}) {
			return false, usageError{errors.New("--etcd-endpoints and the --etcd-*-file flags need --datastore etcdv3")}
		}
		return false, nil
	}
	return true, d.etcd.Validate()
}
