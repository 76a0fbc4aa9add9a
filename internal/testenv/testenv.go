// Package testenv is the product-level test harness: a real etcd and kube-apiserver (built by
// hack/tools.sh) with static-token users for an admin, a kubelet, the product's service account
// and a plain user; the real kubectl and helm against it; the product installed from its rendered
// chart (InstallChart); Calico's API server as an APIService; and the small parts every
// integration test needs: Eventually, FreePort(s), RepoPath, Tail, a fake admission webhook
// (AdmissionRecorder) and, in nodetest, the one Node builder of the unit tests.
//
// The binaries are found through the KUBE_APISERVER, ETCD, KUBECTL and HELM environment
// variables, falling back to hack/tools.sh's cache; a missing binary fails the test with a
// message to run hack/tools.sh.
//
// There is no kube-controller-manager: namespaces are never finalized (use unique names) and no
// "default" ServiceAccount appears by itself (use Env.CreateNamespace before creating Pods).
//
// Test support: the integration tests, `make demo` and bgpverify's calico speaker (confd needs an
// API server holding the product's state) call it.
package testenv

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// The static-token users every Env has.
const (
	// UserAdmin is in system:masters.
	UserAdmin = "admin"
	// UserKubelet is a kubelet-like identity in system:nodes.
	UserKubelet = "system:node:node-1"
	// UserServiceAccount is the product's service account identity.
	UserServiceAccount = "system:serviceaccount:calico-rr-autoscaler:calico-rr-autoscaler"
	// UserAlice is a plain authenticated user.
	UserAlice = "alice"
)

// User is a static-token identity of the apiserver.
type User struct {
	Name   string
	Groups []string
	// ClusterAdmin makes Start bind the user to the cluster-admin role.
	ClusterAdmin bool
}

// DefaultUsers are the users every Env has. All but UserAdmin (already in
// system:masters) are bound to cluster-admin, so that tests see what
// admission webhooks deny rather than what RBAC denies.
func DefaultUsers() []User {
	return []User{
		{Name: UserAdmin, Groups: []string{"system:masters", "system:authenticated"}},
		{Name: UserKubelet, Groups: []string{"system:nodes", "system:authenticated"}, ClusterAdmin: true},
		{Name: UserServiceAccount, Groups: []string{"system:serviceaccounts",
			"system:serviceaccounts:calico-rr-autoscaler", "system:authenticated"}, ClusterAdmin: true},
		{Name: UserAlice, Groups: []string{"system:authenticated"}, ClusterAdmin: true},
	}
}

// Options configure an Env.
type Options struct {
	// Users are added to DefaultUsers (a user of the same name replaces
	// the default one).
	Users []User
	// APIServerFlags are appended to kube-apiserver's command line (a later
	// flag overrides an earlier one).
	APIServerFlags []string
	// EtcdFlags are appended to etcd's command line (e.g. a larger --quota-backend-bytes for a
	// cluster of tens of thousands of nodes: etcd's default quota is 2 GiB).
	EtcdFlags []string
	// StartTimeout bounds the start of etcd and kube-apiserver; 2m if 0.
	StartTimeout time.Duration
	// Aggregation configures kube-apiserver's aggregation layer (WithAggregation).
	Aggregation bool
	// EtcdOnly starts etcd alone (StartEtcd): for Calico's etcd datastore, which needs no API
	// server.
	EtcdOnly bool
	// Name is put in the environment's folder name (rra-testenv-<Name>-*), which etcd's and
	// kube-apiserver's command lines carry: ps, and a CPU sampler, tell which test runs them.
	// Start and StartEtcd set it to the test's name.
	Name string
}

// Option changes Options.
type Option func(*Options)

// WithUser adds a static-token user.
func WithUser(name string, clusterAdmin bool, groups ...string) Option {
	return func(o *Options) {
		o.Users = append(o.Users, User{Name: name, Groups: groups, ClusterAdmin: clusterAdmin})
	}
}

// WithChartRBAC leaves UserServiceAccount without cluster-admin: what the product may do comes
// from its chart's RBAC only (InstallChart).
func WithChartRBAC() Option {
	return func(o *Options) {
		for _, u := range DefaultUsers() {
			if u.Name == UserServiceAccount {
				u.ClusterAdmin = false
				o.Users = append(o.Users, u)
			}
		}
	}
}

// WithAPIServerFlags appends flags to kube-apiserver's command line.
func WithAPIServerFlags(flags ...string) Option {
	return func(o *Options) { o.APIServerFlags = append(o.APIServerFlags, flags...) }
}

// WithEtcdFlags appends flags to etcd's command line.
func WithEtcdFlags(flags ...string) Option {
	return func(o *Options) { o.EtcdFlags = append(o.EtcdFlags, flags...) }
}

// WithAggregation configures kube-apiserver's aggregation layer as kubeadm does: a front-proxy CA
// (--requestheader-client-ca-file, Env.FrontProxyCA) trusted for the X-Remote-User,
// X-Remote-Group and X-Remote-Extra- headers from FrontProxyClient only, and the client
// certificate kube-apiserver proxies APIService requests with. kube-apiserver publishes these in
// kube-system/extension-apiserver-authentication, where aggregated API servers read them.
func WithAggregation() Option {
	return func(o *Options) { o.Aggregation = true }
}

// WithStartTimeout sets Options.StartTimeout.
func WithStartTimeout(d time.Duration) Option {
	return func(o *Options) { o.StartTimeout = d }
}

// Env is a running etcd + kube-apiserver.
type Env struct {
	// Config is the admin's (system:masters) client config.
	Config *rest.Config
	// URL is the apiserver's https URL on 127.0.0.1.
	URL string
	// CAData is the PEM CA that signed the apiserver's serving certificate.
	CAData []byte
	// EtcdURL is etcd's client URL (http on 127.0.0.1). Calico's etcd datastore can share it:
	// Calico keeps its keys under /calico, the API server under /registry.
	EtcdURL string
	// FrontProxyCA is the front-proxy CA file with WithAggregation, else empty.
	FrontProxyCA string
	// Dir is the temporary directory with the etcd data, certificates,
	// logs and kubeconfigs; removed by Stop.
	Dir string

	users     map[string]User
	tokens    map[string]string
	etcd      *process
	apiserver *process

	mu          sync.Mutex
	kubeconfigs map[string]string
	dyn         dynamic.Interface // the admin's, for JSONPath (made on its first call)
	stopOnce    sync.Once
}

// Start starts an Env for the test and stops it in t.Cleanup. It fails the
// test if a binary is missing or the apiserver does not become ready.
func Start(t testing.TB, opts ...Option) *Env {
	t.Helper()
	o := Options{Name: t.Name()}
	for _, f := range opts {
		f(&o)
	}
	RequireBinary(t, ToolEtcd)
	RequireBinary(t, ToolKubeAPIServer)
	start := time.Now()
	env, err := StartEnv(t.Context(), o)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Logf("testenv: kube-apiserver %s ready at %s in %s", KubernetesVersion, env.URL, time.Since(start).Round(time.Millisecond))
	env.stopWith(t)
	return env
}

// StartEtcd starts etcd alone for the test, as Calico's etcd datastore (Env.EtcdURL), and stops
// it in t.Cleanup.
func StartEtcd(t testing.TB) *Env {
	t.Helper()
	RequireBinary(t, ToolEtcd)
	env, err := StartEnv(t.Context(), Options{EtcdOnly: true, Name: t.Name()})
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	env.stopWith(t)
	return env
}

// stopWith stops the Env when the test ends, printing its logs' tails when the test failed.
func (e *Env) stopWith(t testing.TB) {
	t.Cleanup(func() {
		if t.Failed() {
			if e.apiserver != nil {
				t.Logf("testenv: kube-apiserver log tail:\n%s", Tail(e.apiserver.logPath, 40))
			}
			t.Logf("testenv: etcd log tail:\n%s", Tail(e.etcd.logPath, 15))
		}
		if os.Getenv("RRA_TESTENV_KEEP") != "" {
			t.Logf("testenv: RRA_TESTENV_KEEP set: keeping %s", e.Dir)
		}
		e.Stop()
	})
}

// StartEnv starts an Env; the caller must call Stop. ctx bounds only the
// start, not the life of the processes.
func StartEnv(ctx context.Context, o Options) (*Env, error) {
	etcdBin, err := BinaryPath(ToolEtcd)
	if err != nil {
		return nil, err
	}
	var apiBin string
	if !o.EtcdOnly {
		if apiBin, err = BinaryPath(ToolKubeAPIServer); err != nil {
			return nil, err
		}
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, o.StartTimeout)
	defer cancel()

	// Free ports are picked by binding and closing, so another process may
	// grab one before we use it: retry a few times when that happens.
	for attempt := 1; ; attempt++ {
		env, err := startOnce(ctx, o, etcdBin, apiBin)
		if err == nil {
			return env, nil
		}
		if attempt >= 3 || !errors.Is(err, errPortInUse) || ctx.Err() != nil {
			return nil, err
		}
	}
}

var errPortInUse = errors.New("port in use")

// folderName is name (a test's) as the start of a folder name: every byte but ASCII letters and
// digits becomes '_' (a subtest's name has '/', spaces and commas, and helm reads a comma in -f as
// a list), at most 60 bytes, and a '-' after it.
func folderName(name string) string {
	if name == "" {
		return ""
	}
	b := []byte(name[:min(len(name), 60)])
	for i, c := range b {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			b[i] = '_'
		}
	}
	return string(b) + "-"
}

func startOnce(ctx context.Context, o Options, etcdBin, apiBin string) (_ *Env, err error) {
	dir, err := os.MkdirTemp("", "rra-testenv-"+folderName(o.Name))
	if err != nil {
		return nil, err
	}
	e := &Env{Dir: dir, users: map[string]User{}, tokens: map[string]string{}, kubeconfigs: map[string]string{}}
	defer func() {
		if err != nil {
			e.Stop()
		}
	}()

	ports, err := FreePorts(3)
	if err != nil {
		return nil, err
	}
	etcdClient := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	etcdPeer := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	securePort := ports[2]

	// etcd.
	e.etcd, err = startProcess("etcd", etcdBin, filepath.Join(dir, "etcd.log"), append([]string{
		"--name=testenv",
		"--data-dir=" + filepath.Join(dir, "etcd"),
		"--listen-client-urls=" + etcdClient,
		"--advertise-client-urls=" + etcdClient,
		"--listen-peer-urls=" + etcdPeer,
		"--initial-advertise-peer-urls=" + etcdPeer,
		"--initial-cluster=testenv=" + etcdPeer,
		"--initial-cluster-state=new",
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	}, o.EtcdFlags...)...)
	if err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, e.etcd, http.DefaultClient, etcdClient+"/health", nil); err != nil {
		return nil, err
	}
	e.EtcdURL = etcdClient
	if o.EtcdOnly {
		return e, nil
	}

	// Certificates, service account key and token users.
	certDir := filepath.Join(dir, "certs")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return nil, err
	}
	caPEM, certFile, keyFile, err := servingCerts(certDir)
	if err != nil {
		return nil, fmt.Errorf("serving certificates: %w", err)
	}
	saKey, saPub, err := serviceAccountKey(certDir)
	if err != nil {
		return nil, fmt.Errorf("service account key: %w", err)
	}
	users := DefaultUsers()
	for _, u := range o.Users {
		replaced := false
		for i := range users {
			if users[i].Name == u.Name {
				users[i], replaced = u, true
			}
		}
		if !replaced {
			users = append(users, u)
		}
	}
	var tokenCSV bytes.Buffer
	for _, u := range users {
		tok, err := randomToken()
		if err != nil {
			return nil, err
		}
		e.users[u.Name] = u
		e.tokens[u.Name] = tok
		fmt.Fprintf(&tokenCSV, "%s,%s,%s,\"%s\"\n", tok, u.Name, u.Name, strings.Join(u.Groups, ","))
	}
	tokenFile := filepath.Join(certDir, "tokens.csv")
	if err := os.WriteFile(tokenFile, tokenCSV.Bytes(), 0o600); err != nil {
		return nil, err
	}

	// kube-apiserver.
	args := []string{
		"--advertise-address=127.0.0.1",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(securePort),
		"--etcd-servers=" + etcdClient,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--cert-dir=" + certDir,
		"--tls-cert-file=" + certFile,
		"--tls-private-key-file=" + keyFile,
		"--token-auth-file=" + tokenFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + saPub,
		"--service-account-signing-key-file=" + saKey,
		"--allow-privileged=true",
		// The lease reconciler would try to publish 127.0.0.1 as the
		// endpoint of the "kubernetes" Service, which is invalid.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
	}
	if o.Aggregation {
		ca, cert, key, err := frontProxyCerts(certDir)
		if err != nil {
			return nil, fmt.Errorf("front-proxy certificates: %w", err)
		}
		e.FrontProxyCA = ca
		args = append(args,
			"--requestheader-client-ca-file="+ca,
			"--requestheader-allowed-names="+FrontProxyClient,
			"--requestheader-username-headers=X-Remote-User",
			"--requestheader-group-headers=X-Remote-Group",
			"--requestheader-extra-headers-prefix=X-Remote-Extra-",
			"--proxy-client-cert-file="+cert,
			"--proxy-client-key-file="+key,
		)
	}
	args = append(args, o.APIServerFlags...)
	e.apiserver, err = startProcess("kube-apiserver", apiBin, filepath.Join(dir, "kube-apiserver.log"), args...)
	if err != nil {
		return nil, err
	}

	e.CAData = caPEM
	e.URL = "https://127.0.0.1:" + strconv.Itoa(securePort)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
	}}
	defer hc.CloseIdleConnections()
	if err := waitHTTP(ctx, e.apiserver, hc, e.URL+"/readyz", map[string]string{
		"Authorization": "Bearer " + e.tokens[UserAdmin],
	}); err != nil {
		return nil, err
	}
	e.Config = e.ConfigFor(UserAdmin)

	if err := e.bootstrap(ctx, users); err != nil {
		return nil, err
	}
	return e, nil
}

// bootstrap binds users to cluster-admin and waits for the default
// namespace.
func (e *Env) bootstrap(ctx context.Context, users []User) error {
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		return err
	}
	for _, u := range users {
		if !u.ClusterAdmin {
			continue
		}
		crb := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "testenv:cluster-admin:" + strings.ReplaceAll(u.Name, ":", ".")},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: u.Name}},
		}
		if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("binding %s to cluster-admin: %w", u.Name, err)
		}
	}
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Namespaces().Get(ctx, metav1.NamespaceDefault, metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for namespace default: %w", err)
	}
	return nil
}

// Users lists the static-token user names.
func (e *Env) Users() []string {
	names := make([]string, 0, len(e.users))
	for n := range e.users {
		names = append(names, n)
	}
	return names
}

// Token is the bearer token of a user; it panics for an unknown user.
func (e *Env) Token(user string) string {
	tok, ok := e.tokens[user]
	if !ok {
		panic(fmt.Sprintf("testenv: unknown user %q (known: %v)", user, e.Users()))
	}
	return tok
}

// ConfigFor is a client config that authenticates as user (one of the
// User* constants or a user added with WithUser); it panics for an unknown
// user.
func (e *Env) ConfigFor(user string) *rest.Config {
	return &rest.Config{
		Host:            e.URL,
		BearerToken:     e.Token(user),
		TLSClientConfig: rest.TLSClientConfig{CAData: append([]byte(nil), e.CAData...)},
		QPS:             200,
		Burst:           400,
		UserAgent:       "rra-testenv-" + strings.NewReplacer(":", "-", "/", "-").Replace(user), // the field manager names the user
	}
}

// KubeconfigPath writes (once) a kubeconfig file for user and returns its
// path.
func (e *Env) KubeconfigPath(user string) string {
	tok := e.Token(user)
	e.mu.Lock()
	defer e.mu.Unlock()
	if p, ok := e.kubeconfigs[user]; ok {
		return p
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["testenv"] = &clientcmdapi.Cluster{Server: e.URL, CertificateAuthorityData: e.CAData}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: tok}
	cfg.Contexts["testenv"] = &clientcmdapi.Context{Cluster: "testenv", AuthInfo: user, Namespace: metav1.NamespaceDefault}
	cfg.CurrentContext = "testenv"
	p := filepath.Join(e.Dir, "kubeconfig-"+sanitize(user))
	if err := clientcmd.WriteToFile(*cfg, p); err != nil {
		panic(fmt.Sprintf("testenv: writing kubeconfig: %v", err))
	}
	e.kubeconfigs[user] = p
	return p
}

// Kubectl runs the real kubectl as user and returns its stdout and stderr.
func (e *Env) Kubectl(t testing.TB, user string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return e.KubectlStdin(t, user, "", args...)
}

// KubectlStdin is Kubectl with stdin (e.g. for "apply -f -").
func (e *Env) KubectlStdin(t testing.TB, user, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	bin := RequireBinary(t, ToolKubectl)
	kc := e.KubeconfigPath(user)
	full := append([]string{"--kubeconfig=" + kc, "--cache-dir=" + filepath.Join(e.Dir, "kubectl-cache")}, args...)
	return run(t, bin, full, stdin, []string{"KUBECONFIG=" + kc})
}

// Helm runs the real helm as user, with helm's config, cache and data
// directories inside Env.Dir.
func (e *Env) Helm(t testing.TB, user string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	bin := RequireBinary(t, ToolHelm)
	h := filepath.Join(e.Dir, "helm")
	return run(t, bin, args, "", []string{
		"KUBECONFIG=" + e.KubeconfigPath(user),
		"HELM_CONFIG_HOME=" + filepath.Join(h, "config"),
		"HELM_CACHE_HOME=" + filepath.Join(h, "cache"),
		"HELM_DATA_HOME=" + filepath.Join(h, "data"),
	})
}

// CreateNamespace creates a namespace with the "default" ServiceAccount that
// kube-controller-manager would create, so that Pods can be created in it.
func (e *Env) CreateNamespace(t testing.TB, name string) *corev1.Namespace {
	t.Helper()
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	ns, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("testenv: creating namespace %s: %v", name, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: name}}
	if _, err := cs.CoreV1().ServiceAccounts(name).Create(t.Context(), sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("testenv: creating service account %s/default: %v", name, err)
	}
	return ns
}

// Stop kills kube-apiserver and etcd (their whole process groups) and
// removes Dir (kept when RRA_TESTENV_KEEP is set). It is safe to call more
// than once.
func (e *Env) Stop() {
	e.stopOnce.Do(func() {
		e.apiserver.stop()
		e.etcd.stop()
		if os.Getenv("RRA_TESTENV_KEEP") == "" && e.Dir != "" {
			_ = os.RemoveAll(e.Dir)
		}
	})
}

func run(t testing.TB, bin string, args []string, stdin string, env []string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(filteredEnviron("KUBECONFIG"), env...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("%s %s: %w", filepath.Base(bin), strings.Join(args, " "), err)
	}
	return out.String(), errb.String(), err
}

func filteredEnviron(drop ...string) []string {
	var out []string
next:
	for _, kv := range os.Environ() {
		for _, d := range drop {
			if strings.HasPrefix(kv, d+"=") {
				continue next
			}
		}
		out = append(out, kv)
	}
	return out
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '.':
			return r
		}
		return '_'
	}, s)
}

// process is a child in its own process group, logging to a file.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	err     error
}

func startProcess(name, bin, logPath string, args ...string) (*process, error) {
	return startProcessEnv(name, bin, logPath, infraGC(), args...)
}

// infraGOGC is the collector's target of the test's own kube-apiserver and etcd unless GOGC is
// set: make test runs a score of them on two cores with memory to spare (TestServeOnRealAPIServer
// alone took 78 s of CPU, 65 s with GOGC=400 for every process of it). Only the test's
// infrastructure: the product keeps its own target.
const infraGOGC = "400"

func infraGC() []string {
	if _, set := os.LookupEnv("GOGC"); set {
		return nil
	}
	return []string{"GOGC=" + infraGOGC}
}

// startProcessEnv is startProcess with env added to the test's environment.
func startProcessEnv(name, bin, logPath string, env []string, args ...string) (*process, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *process) stop() {
	if p == nil {
		return
	}
	pid := p.cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
	}
	// Also reap anything left in the group.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	<-p.done
}

// failure describes a process that did not come up, with its log tail.
func (p *process) failure(what string) error {
	log := Tail(p.logPath, 30)
	err := fmt.Errorf("%s %s; log %s tail:\n%s", p.name, what, p.logPath, log)
	if strings.Contains(log, "address already in use") {
		return fmt.Errorf("%w: %w", errPortInUse, err)
	}
	return err
}

// waitHTTP polls url until it answers 200, the process exits or ctx ends.
func waitHTTP(ctx context.Context, p *process, hc *http.Client, url string, headers map[string]string) error {
	var last string
	for {
		if p.exited() {
			return p.failure(fmt.Sprintf("exited (%v) before %s was ok", p.err, url))
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := hc.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return p.failure(fmt.Sprintf("not ready at %s (%v); last answer: %s", url, ctx.Err(), last))
		case <-p.done:
		case <-time.After(200 * time.Millisecond):
		}
	}
}
