package serve

import (
	"context"
	"net/http"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/calicoetcd"
)

// addEtcdChecks makes the replica not ready while Calico's etcd does not answer (rather than
// crash-looping), and logs one line each time etcd becomes unreachable or reachable again,
// starting with the first check at start.
func addEtcdChecks(mgr manager.Manager, etcd *calicoetcd.Store) error {
	if err := mgr.AddReadyzCheck("etcd", func(r *http.Request) error { return etcd.Check(r.Context()) }); err != nil {
		return err
	}
	return mgr.Add(&etcdWatcher{etcd: etcd})
}

// etcdWatcher logs etcd's reachability when it changes; it runs on every replica.
type etcdWatcher struct{ etcd *calicoetcd.Store }

func (w *etcdWatcher) Start(ctx context.Context) error {
	log := ctrl.Log.WithName("etcd")
	var last error
	first := true
	for {
		err := w.etcd.Check(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil && (first || last == nil):
			log.Error(err, "Calico's etcd does not answer: not ready until it does")
		case err == nil && (first || last != nil):
			log.Info("Calico's etcd answers")
		}
		last, first = err, false
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(5 * time.Second):
		}
	}
}

func (w *etcdWatcher) NeedLeaderElection() bool { return false }
