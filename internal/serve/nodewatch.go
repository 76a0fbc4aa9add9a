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

// nodeClient is a REST client of the core API group whose protobuf responses decode Nodes, NodeLists
// and lists of metadata with nodedecode: what the cache keeps, nothing else (the labels of keys,
// every label when keys is nil). At 65,000 kubelet nodes the whole decode was the restart's first
// list and most of the CPU the kubelets' status reports cost (BENCHMARKS.md).
func nodeClient(cfg *rest.Config, keys *state.LabelKeys) (rest.Interface, error) {
	dec := nodedecode.Decoder{KeepAnnotation: state.KeptAnnotation}
	if keys != nil {
		dec.Labels = keys.DecodeLabels
	}
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &corev1.SchemeGroupVersion
	c.APIPath = "/api"
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	c.NegotiatedSerializer = nodedecode.Codecs(clientgoscheme.Codecs.WithoutConversion(), dec)
	return rest.RESTClientFor(c)
}

// nodeListWatch is the node informer's ListerWatcher on rc (nodeClient).
func nodeListWatch(rc rest.Interface) *toolscache.ListWatch {
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
	}
}

// metadataPages lists one page of the nodes' metadata.
type metadataPages func(ctx context.Context, opts metav1.ListOptions) (*metav1.PartialObjectMetadataList, error)

// acceptMetadataList asks the API server for the objects' metadata only, in protobuf.
const acceptMetadataList = runtime.ContentTypeProtobuf + ";as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"

// nodeMetadataPages lists the nodes' metadata on rc (nodeClient), page by page.
func nodeMetadataPages(rc rest.Interface) metadataPages {
	return func(ctx context.Context, opts metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
		list := &metav1.PartialObjectMetadataList{}
		return list, rc.Get().Resource("nodes").VersionedParams(&opts, clientgoscheme.ParameterCodec).
			SetHeader("Accept", acceptMetadataList).Do(ctx).Into(list)
	}
}
