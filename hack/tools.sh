#!/usr/bin/env bash
# Builds (or reuses) the real binaries the integration tests run against:
# kube-apiserver, kubectl, etcd, helm, Calico's confd and Karpenter's controller with its kwok
# cloud provider (test/karpenter). Everything is built
# from source fetched through the Go module proxy (no release tarballs) and
# cached outside the repository, keyed by version:
#
#   ${RRA_CACHE:-$HOME/.cache/calico-rr-autoscaler}/bin/<tool>-<version>
#
# confd is the program inside calico-node that renders BIRD's configuration
# from the datastore; it is built from the github.com/projectcalico/calico
# module go.mod pins (CALICO_VERSION), with github.com/projectcalico/api at
# the version go.mod uses (CALICO_API_VERSION).
#
# It also installs Debian's bird package (BIRD 1.6, what `verify --speaker
# bird|calico` and their tests run) when bird is missing: apt-get install -y
# bird, as root; and Debian's prometheus package for its promtool (the chart's
# alert tests) when promtool is missing.
#
# Karpenter (sigs.k8s.io/karpenter/kwok, its controller with the kwok cloud provider) is built
# from hack/karpenter, a Go module of its own that pins the version (go.mod's tool line,
# KARPENTER_VERSION below must match) and its go.sum, as hack/sign does.
#
# Usage: hack/tools.sh [kube-apiserver] [kubectl] [etcd] [helm] [confd] [calico-apiserver] [karpenter] [bird] [promtool]
#   (no arguments = all tools but karpenter). Safe to call repeatedly and concurrently; it
#   is fast when everything is cached. At the end it writes
#   ${cache}/bin/env.sh exporting KUBE_APISERVER, ETCD, KUBECTL, HELM, CONFD,
#   CALICO_APISERVER, KARPENTER, BIRD and PROMTOOL.
#
# The first build takes ~10 minutes on 2 cores (confd about 2 more). Versions
# can be overridden with K8S_VERSION, ETCD_VERSION, HELM_VERSION,
# CALICO_VERSION and CALICO_API_VERSION.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.34.3}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
HELM_VERSION="${HELM_VERSION:-v3.19.5}"
# Keep in sync with go.mod (github.com/projectcalico/calico and .../api).
CALICO_VERSION="${CALICO_VERSION:-v0.0.0-20251021213802-b1f3c43f8437}"
CALICO_API_VERSION="${CALICO_API_VERSION:-v0.0.0-20251022175904-f2ab03771208}"
# Keep in sync with hack/karpenter/go.mod (sigs.k8s.io/karpenter): v1.8.x is the last line on
# Kubernetes 1.34's client libraries (K8S_VERSION's API server) and Go 1.25.
KARPENTER_VERSION="v1.8.2"
HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"

CACHE="${RRA_CACHE:-$HOME/.cache/calico-rr-autoscaler}"
BIN="$CACHE/bin"
SRC="$CACHE/src"
mkdir -p "$BIN" "$SRC"
CACHE="$(cd "$CACHE" && pwd -P)"
BIN="$CACHE/bin"
SRC="$CACHE/src"

export CGO_ENABLED=0
export GOFLAGS="-mod=mod -buildvcs=false"
export GOWORK=off
export GONOSUMDB="${GONOSUMDB:-github.com/projectcalico}"
export GO111MODULE=on

# karpenter is built only when named (make test-all: its one test is a slow proof), not by default.
ALL_TOOLS=(kube-apiserver kubectl etcd helm confd calico-apiserver bird promtool)

log() { printf '%s\n' "$*" >&2; }
die() { log "hack/tools.sh: $*"; exit 1; }

command -v go >/dev/null 2>&1 || die "go is not on PATH"

version_of() {
  case "$1" in
    kube-apiserver|kubectl) echo "$K8S_VERSION" ;;
    etcd) echo "$ETCD_VERSION" ;;
    helm) echo "$HELM_VERSION" ;;
    confd|calico-apiserver) echo "$CALICO_VERSION" ;;
    karpenter) echo "$KARPENTER_VERSION" ;;
    bird) echo "1.6" ;;
    promtool) echo "debian" ;;
    *) die "unknown tool '$1' (known: ${ALL_TOOLS[*]})" ;;
  esac
}

path_of() { echo "$BIN/$1-$(version_of "$1")"; }

# Runs the binary's version command; used to check a fresh build before it is
# moved into place.
smoke() {
  local tool="$1" bin="$2"
  case "$tool" in
    kube-apiserver|etcd) "$bin" --version ;;
    kubectl) "$bin" version --client ;;
    helm) "$bin" version --short ;;
    confd) "$bin" -version ;;
    calico-apiserver) "$bin" --help ;;
    karpenter) test -s "$bin" ;;
  esac
}

# go.mod of a module version, via the module proxy.
gomod_of() {
  go mod download -json "$1" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p'
}

# Prepares $SRC/<name> as a throwaway main module and echoes its path.
new_module() {
  local name="$1" dir="$SRC/$1"
  mkdir -p "$dir"
  echo "$dir"
}

prepare_k8s_module() {
  local dir mod staging_ver replaces
  dir="$(new_module "kubernetes-$K8S_VERSION")"
  if [[ ! -f "$dir/.ready" ]]; then
    mod="$(cd "$dir" && gomod_of "k8s.io/kubernetes@$K8S_VERSION")"
    [[ -f "$mod" ]] || die "could not fetch k8s.io/kubernetes@$K8S_VERSION go.mod"
    staging_ver="v0.${K8S_VERSION#v1.}"
    # Every staging module k8s.io/kubernetes replaces with ./staging/src/...
    replaces="$(sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\)[[:space:]]*=>[[:space:]]*\./staging/.*#\1#p' "$mod")"
    [[ -n "$replaces" ]] || die "no staging replaces found in $mod"
    {
      echo "module rra.local/kubernetes-tools"
      echo
      echo "go 1.24.0"
      echo
      echo "godebug default=go1.24"
      echo
      echo "require k8s.io/kubernetes $K8S_VERSION"
      echo
      echo "replace ("
      local m
      for m in $replaces; do
        echo "	$m => $m $staging_ver"
      done
      echo ")"
    } >"$dir/go.mod.tmp"
    mv -f "$dir/go.mod.tmp" "$dir/go.mod"
    touch "$dir/.ready"
  fi
  echo "$dir"
}

prepare_simple_module() {
  local name="$1" req="$2" ver="$3" dir
  dir="$(new_module "$name")"
  if [[ ! -f "$dir/.ready" ]]; then
    printf 'module rra.local/%s\n\ngo 1.24.0\n\nrequire %s %s\n' "$name" "$req" "$ver" >"$dir/go.mod.tmp"
    mv -f "$dir/go.mod.tmp" "$dir/go.mod"
    touch "$dir/.ready"
  fi
  echo "$dir"
}

# A throwaway main module that requires the calico module and the api module
# at the versions go.mod uses. The calico module's own replace lines for its
# lib/httpmachinery and lib/std submodules point into its repository; here
# they point at the same pseudo-version on the proxy. (The proxy's calico
# module has no api/ folder, hence the explicit api requirement.)
prepare_confd_module() {
  local dir
  dir="$(new_module "confd-$CALICO_VERSION")"
  if [[ ! -f "$dir/.ready" ]]; then
    {
      echo "module rra.local/confd"
      echo
      echo "go 1.24.0"
      echo
      echo "require ("
      echo "	github.com/projectcalico/calico $CALICO_VERSION"
      echo "	github.com/projectcalico/api $CALICO_API_VERSION"
      echo ")"
      echo
      echo "replace github.com/projectcalico/calico/lib/httpmachinery => github.com/projectcalico/calico/lib/httpmachinery $CALICO_VERSION"
      echo
      echo "replace github.com/projectcalico/calico/lib/std => github.com/projectcalico/calico/lib/std $CALICO_VERSION"
    } >"$dir/go.mod.tmp"
    mv -f "$dir/go.mod.tmp" "$dir/go.mod"
    touch "$dir/.ready"
  fi
  echo "$dir"
}

TMPFILES=()
cleanup() {
  local f
  for f in "${TMPFILES[@]+"${TMPFILES[@]}"}"; do rm -f "$f"; done
}
trap cleanup EXIT

# group_of names the module source a tool is built from: one build job per source.
group_of() {
  case "$1" in
    kube-apiserver|kubectl) echo kubernetes ;;
    confd|calico-apiserver) echo calico ;;
    *) echo "$1" ;;
  esac
}

build_tool() {
  local tool="$1" ver dest dir pkg ldflags tmp
  ver="$(version_of "$tool")"
  dest="$(path_of "$tool")"
  case "$tool" in
    kube-apiserver|kubectl)
      dir="$(prepare_k8s_module)"
      pkg="k8s.io/kubernetes/cmd/$tool"
      local major minor p
      major="${K8S_VERSION#v}"; major="${major%%.*}"
      minor="${K8S_VERSION#v*.}"; minor="${minor%%.*}"
      ldflags="-s -w"
      for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ldflags+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=$major -X $p.gitMinor=$minor"
        ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
      done
      ;;
    etcd)
      dir="$(prepare_simple_module "etcd-$ETCD_VERSION" go.etcd.io/etcd/server/v3 "$ETCD_VERSION")"
      # The module root of go.etcd.io/etcd/server/v3 is etcd's main package.
      pkg="go.etcd.io/etcd/server/v3"
      ldflags="-s -w"
      ;;
    helm)
      dir="$(prepare_simple_module "helm-$HELM_VERSION" helm.sh/helm/v3 "$HELM_VERSION")"
      pkg="helm.sh/helm/v3/cmd/helm"
      # Like helm's Makefile: report the real version and the Kubernetes
      # version of its client libraries as the default capabilities.
      local hmod kminor
      hmod="$(cd "$dir" && gomod_of "helm.sh/helm/v3@$HELM_VERSION")"
      kminor="$(sed -n 's#^[[:space:]]*k8s\.io/client-go v0\.\([0-9]*\)\..*#\1#p' "$hmod" | head -n1)"
      ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
      if [[ -n "$kminor" ]]; then
        ldflags+=" -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$kminor"
        ldflags+=" -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$kminor"
      fi
      ;;
    confd)
      dir="$(prepare_confd_module)"
      pkg="github.com/projectcalico/calico/confd"
      ldflags="-s -w -X github.com/projectcalico/calico/pkg/buildinfo.Version=$CALICO_VERSION"
      ;;
    calico-apiserver)
      # Calico's API server (projectcalico.org/v3 as an aggregated API server), from the same
      # module as confd; the tests register it as the APIService v3.projectcalico.org.
      dir="$(prepare_confd_module)"
      pkg="github.com/projectcalico/calico/apiserver/cmd/apiserver"
      ldflags="-s -w -X github.com/projectcalico/calico/pkg/buildinfo.Version=$CALICO_VERSION"
      ;;
    karpenter)
      # hack/karpenter's go.mod and go.sum pin it (go.mod's tool line); -mod=readonly: a build
      # never rewrites them.
      dir="$HACK_DIR/karpenter"
      grep -q "sigs.k8s.io/karpenter $KARPENTER_VERSION" "$dir/go.mod" \
        || die "hack/karpenter/go.mod does not require sigs.k8s.io/karpenter $KARPENTER_VERSION"
      pkg="sigs.k8s.io/karpenter/kwok"
      ldflags="-s -w -X sigs.k8s.io/karpenter/pkg/operator.Version=$KARPENTER_VERSION"
      ;;
  esac

  tmp="$BIN/.$tool-$ver.tmp.$$"
  TMPFILES+=("$tmp")
  local start=$SECONDS
  local mflag=()
  [[ "$tool" == karpenter ]] && mflag=(-mod=readonly)
  (cd "$dir" && go build "${mflag[@]}" -trimpath -ldflags "$ldflags" -o "$tmp" "$pkg") \
    || die "building $tool $ver failed"
  smoke "$tool" "$tmp" >/dev/null 2>&1 || die "built $tool $ver but '$tool' does not run"
  chmod 0755 "$tmp"
  mv -f "$tmp" "$dest"
  log "built $tool $ver in $((SECONDS - start))s -> $dest"
}

# bird is not built: Debian's package bird is BIRD 1.6.8, the version Calico's
# fork of BIRD derives from. promtool (the chart's alert rules: promtool check
# rules, promtool test rules) comes with Debian's package prometheus. Both are
# installed with apt-get when missing (as root).
bird_path() { command -v bird 2>/dev/null || true; }
promtool_path() { command -v promtool 2>/dev/null || true; }

# ensure_apt CMD PACKAGE WHAT: installs Debian's PACKAGE (without its
# recommendations) when CMD is not on PATH; WHAT says what needs it.
ensure_apt() {
  local cmd="$1" pkg="$2" what="$3" p
  p="$(command -v "$cmd" 2>/dev/null || true)"
  if [[ -n "$p" ]]; then
    log "using installed $cmd ($p)"
    return
  fi
  if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
    log "$cmd is missing: install it (Debian: apt-get install -y $pkg) for $what"
    return
  fi
  exec 8>"$CACHE/.apt.lock"
  command -v flock >/dev/null 2>&1 && flock 8
  if [[ -z "$(command -v "$cmd" 2>/dev/null || true)" ]]; then
    log "installing Debian's $pkg ($cmd) with apt-get..."
    local start=$SECONDS
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -q --no-install-recommends "$pkg" >/dev/null 2>&1; then
      apt-get update -q >/dev/null 2>&1 || true
      apt-get install -y -q --no-install-recommends "$pkg" >/dev/null 2>&1 || log "apt-get install -y $pkg failed"
    fi
    p="$(command -v "$cmd" 2>/dev/null || true)"
    [[ -n "$p" ]] && log "installed $pkg in $((SECONDS - start))s -> $p"
  fi
  exec 8>&-
}

# Debian's bird package ships bird6 (BIRD 1.6 for IPv6) beside bird: verify runs it for IPv6.
ensure_bird() {
  ensure_apt bird bird "verify --speaker bird|calico and its tests"
  command -v bird6 >/dev/null 2>&1 || ensure_apt bird6 bird "verify's IPv6 runs (bird6)"
}

# The prometheus package also installs a Prometheus server service; in a
# container without an init system it is not started (policy-rc.d), and only
# promtool is used.
ensure_promtool() { ensure_apt promtool prometheus "the chart's alert tests (promtool check rules, promtool test rules)"; }

ensure_tool() {
  local tool="$1" ver dest
  if [[ "$tool" == bird ]]; then
    ensure_bird
    return
  fi
  if [[ "$tool" == promtool ]]; then
    ensure_promtool
    return
  fi
  ver="$(version_of "$tool")"
  dest="$(path_of "$tool")"
  if [[ -x "$dest" ]]; then
    log "using cached $tool $ver ($dest)"
    return
  fi
  # Serialise the builds from one module source (kube-apiserver and kubectl share Kubernetes',
  # confd and calico-apiserver Calico's) across this script's jobs and concurrent callers;
  # re-check after the wait.
  exec 9>"$CACHE/.build-$(group_of "$tool").lock"
  if command -v flock >/dev/null 2>&1; then
    if ! flock -n 9; then
      log "waiting for another hack/tools.sh build to finish..."
      flock 9
    fi
  fi
  if [[ -x "$dest" ]]; then
    log "using cached $tool $ver ($dest)"
  else
    log "building $tool $ver (first time takes minutes)..."
    build_tool "$tool"
  fi
  exec 9>&-
}

tools=("$@")
if [[ ${#tools[@]} -eq 0 ]]; then
  tools=("${ALL_TOOLS[@]}")
fi
for t in "${tools[@]}"; do version_of "$t" >/dev/null; done
log "hack/tools.sh: ${tools[*]}"
# One job per module source, all at once: go build already uses every core for the compile,
# and the jobs fill each other's downloads, links and apt-get waits.
declare -A jobs=()
for t in "${tools[@]}"; do jobs[$(group_of "$t")]+="$t "; done
pids=()
for g in "${!jobs[@]}"; do
  (
    trap cleanup EXIT
    for t in ${jobs[$g]}; do ensure_tool "$t"; done
  ) &
  pids+=($!)
done
failed=0
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
[[ $failed == 0 ]] || die "a tool could not be built or installed (see above)"
log "hack/tools.sh: ${tools[*]} ready in ${SECONDS}s"

env_tmp="$BIN/.env.sh.tmp.$$"
TMPFILES+=("$env_tmp")
{
  echo "# Generated by hack/tools.sh; source this file."
  echo "export KUBE_APISERVER='$(path_of kube-apiserver)'"
  echo "export ETCD='$(path_of etcd)'"
  echo "export KUBECTL='$(path_of kubectl)'"
  echo "export HELM='$(path_of helm)'"
  echo "export CONFD='$(path_of confd)'"
  echo "export CALICO_APISERVER='$(path_of calico-apiserver)'"
  echo "export KARPENTER='$(path_of karpenter)'"
  if [[ -n "$(bird_path)" ]]; then
    echo "export BIRD='$(bird_path)'"
  fi
  if [[ -n "$(promtool_path)" ]]; then
    echo "export PROMTOOL='$(promtool_path)'"
  fi
} >"$env_tmp"
mv -f "$env_tmp" "$BIN/env.sh"

for v in KUBE_APISERVER:kube-apiserver ETCD:etcd KUBECTL:kubectl HELM:helm CONFD:confd CALICO_APISERVER:calico-apiserver KARPENTER:karpenter; do
  p="$(path_of "${v#*:}")"
  if [[ -x "$p" ]]; then
    echo "${v%%:*}=$p"
  else
    echo "${v%%:*}=$p (not built yet)"
  fi
done
if [[ -n "$(bird_path)" ]]; then
  echo "BIRD=$(bird_path)"
else
  echo "BIRD= (not installed: apt-get install -y bird)"
fi
if [[ -n "$(promtool_path)" ]]; then
  echo "PROMTOOL=$(promtool_path)"
else
  echo "PROMTOOL= (not installed: apt-get install -y prometheus)"
fi
echo "env: source $BIN/env.sh"
