//go:build slim

package calicoetcd

import (
	"context"
	"errors"
	"time"

	apiv3 "github.com/projectcalico/api/pkg/apis/projectcalico/v3"

	libapiv3 "github.com/projectcalico/calico/libcalico-go/lib/apis/v3"

	"github.com/calico-rr-autoscaler/calico-rr-autoscaler/extender"
)

// The slim build has no etcd datastore: ParseDatastore refuses etcdv3, so no Store is ever made.
// Store and its handles keep the full build's methods, so that the callers build alike; each
// answers errSlim.
const etcdBuiltIn = false

var errSlim = errors.New("this binary is the slim build, without Calico's etcd datastore: run calico-rr-autoscaler-full")

// Store is a Calico client on etcd: none in the slim build.
type Store struct {
	// Timeout bounds each call.
	Timeout time.Duration
}

// New fails: the slim build has no etcd datastore.
func New(Config) (*Store, error) { return nil, errSlim }

func (s *Store) Check(context.Context) error                               { return errSlim }
func (s *Store) Addresses() map[string]extender.CalicoAddresses            { return nil }
func (s *Store) Registered() map[string]bool                               { return nil }
func (s *Store) WatchChanges(context.Context, func())                      {}
func (s *Store) ReadState(context.Context) (*State, error)                 { return nil, errSlim }
func (s *Store) BGPAddresses(context.Context) (map[string][]string, error) { return nil, errSlim }
func (s *Store) ListNodes(context.Context) (map[string]*libapiv3.Node, error) {
	return nil, errSlim
}
func (s *Store) Roles(context.Context, []string) (map[string]Role, error) { return nil, errSlim }
func (s *Store) SetRole(context.Context, string, []string, Role) error    { return errSlim }
func (s *Store) Configs() Configs                                         { return Configs{} }
func (s *Store) Peers() Peers                                             { return Peers{} }
func (s *Store) NodeStatuses() NodeStatuses                               { return NodeStatuses{} }

// Configs are the BGPConfigurations of a Store: none in the slim build.
type Configs struct{}

func (Configs) Get(context.Context, string) (*apiv3.BGPConfiguration, error) { return nil, errSlim }
func (Configs) Create(context.Context, *apiv3.BGPConfiguration) error        { return errSlim }
func (Configs) Patch(context.Context, *apiv3.BGPConfiguration, *apiv3.BGPConfiguration) error {
	return errSlim
}

// Peers are the BGPPeers of a Store: none in the slim build.
type Peers struct{}

func (Peers) List(context.Context, map[string]string) ([]*apiv3.BGPPeer, error) { return nil, errSlim }
func (Peers) Create(context.Context, *apiv3.BGPPeer) error                      { return errSlim }
func (Peers) Update(context.Context, *apiv3.BGPPeer) error                      { return errSlim }
func (Peers) Delete(context.Context, *apiv3.BGPPeer) error                      { return errSlim }

// NodeStatuses are the CalicoNodeStatuses of a Store: none in the slim build.
type NodeStatuses struct{}

func (NodeStatuses) List(context.Context, map[string]string) ([]*apiv3.CalicoNodeStatus, error) {
	return nil, errSlim
}
func (NodeStatuses) Create(context.Context, *apiv3.CalicoNodeStatus) error { return errSlim }
func (NodeStatuses) Delete(context.Context, *apiv3.CalicoNodeStatus) error { return errSlim }
