package serve

import "os"

// EnvWatchListClient is client-go's switch of its WatchListClient feature (KEP-3157).
const EnvWatchListClient = "KUBE_FEATURE_WatchListClient"

// StreamInitialLists turns client-go's WatchListClient on for this process unless
// KUBE_FEATURE_WatchListClient is set (to either value). The cache's first sync then arrives as a
// stream of watch events (sendInitialEvents), each node stripped by the cache's transform
// (state.StripNode) as it arrives, instead of one list response whose nodes are all decoded whole
// before the transform sees any: at 65,000 kubelet nodes that list made a restart peak at about
// 5 GB. An API server without the stream (WatchList off, before Kubernetes 1.32) makes client-go
// fall back to the list. It must run before any client is built (client-go reads the variable once).
func StreamInitialLists() {
	if _, set := os.LookupEnv(EnvWatchListClient); !set {
		_ = os.Setenv(EnvWatchListClient, "true")
	}
}
