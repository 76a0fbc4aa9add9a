package serve

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/nodedecode"
	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/internal/state"
)

// nodeListWatch is the node informer's ListerWatcher: the nodes' list and watch in protobuf,
// each Node decoded by nodedecode (what the cache keeps, nothing else) instead of whole. At
// 65,000 kubelet nodes the whole decode was the restart's first list and most of the CPU the
// kubelets' status reports cost (BENCHMARKS.md).
func nodeListWatch(cfg *rest.Config) (*toolscache.ListWatch, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &corev1.SchemeGroupVersion
	c.APIPath = "/api"
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	c.NegotiatedSerializer = nodedecode.Codecs(clientgoscheme.Codecs.WithoutConversion(), nodedecode.Decoder{KeepAnnotation: state.KeptAnnotation})
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, err
	}
	return &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			list := &corev1.NodeList{}
			return list, rc.Get().Resource("nodes").VersionedParams(&opts, clientgoscheme.ParameterCodec).Do(ctx).Into(list)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			var timeout time.Duration
			if opts.TimeoutSeconds != nil {
				timeout = time.Duration(*opts.TimeoutSeconds) * time.Second
			}
			opts.Watch = true
			return rc.Get().Resource("nodes").VersionedParams(&opts, clientgoscheme.ParameterCodec).Timeout(timeout).Watch(ctx)
		},
	}, nil
}
