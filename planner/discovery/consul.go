// Package discovery finds the planner's raft peers through Consul (each server registers
// itself as an instance of one service whose meta carries its raft ID, raft address and
// API URL) or Nomad's native service catalog (the job's service block registers each
// server, with the same three values as tags), and waits until the expected number of
// servers is registered. The result is a
// static peer list for bootstrapping (planner.Config.Peers); raft membership is not
// changed afterwards.
package discovery

import (
	"context"
	"fmt"
	"sort"
	"time"

	consul "github.com/hashicorp/consul/api"

	"github.com/trident-sched/trident/planner"
)

// Service meta keys.
const (
	MetaID       = "raft_id"
	MetaRaftAddr = "raft_addr"
	MetaHTTPAddr = "http_addr"
)

// Consul registers and discovers planner servers.
type Consul struct {
	// Client talks to the local Consul agent.
	Client *consul.Client
	// Service is the Consul service name (e.g. "trident-planner").
	Service string
}

func (c Consul) instanceID(id string) string { return c.Service + "-" + id }

// Register registers self as an instance of the service.
func (c Consul) Register(ctx context.Context, self planner.Peer) error {
	reg := &consul.AgentServiceRegistration{
		ID: c.instanceID(self.ID), Name: c.Service,
		Meta: map[string]string{MetaID: self.ID, MetaRaftAddr: self.RaftAddr, MetaHTTPAddr: self.HTTPAddr},
	}
	if err := c.Client.Agent().ServiceRegisterOpts(reg, consul.ServiceRegisterOpts{}.WithContext(ctx)); err != nil {
		return fmt.Errorf("consul: register %s: %w", reg.ID, err)
	}
	return nil
}

// Deregister removes self's registration.
func (c Consul) Deregister(ctx context.Context, id string) error {
	q := (&consul.QueryOptions{}).WithContext(ctx)
	if err := c.Client.Agent().ServiceDeregisterOpts(c.instanceID(id), q); err != nil {
		return fmt.Errorf("consul: deregister %s: %w", c.instanceID(id), err)
	}
	return nil
}

// Peers lists the registered servers, sorted by ID.
func (c Consul) Peers(ctx context.Context) ([]planner.Peer, error) {
	q := (&consul.QueryOptions{}).WithContext(ctx)
	svcs, _, err := c.Client.Catalog().Service(c.Service, "", q)
	if err != nil {
		return nil, fmt.Errorf("consul: list %s: %w", c.Service, err)
	}
	var out []planner.Peer
	for _, s := range svcs {
		m := s.ServiceMeta
		if m[MetaID] == "" || m[MetaRaftAddr] == "" {
			return nil, fmt.Errorf("consul: instance %s of %s lacks meta %s/%s", s.ServiceID, c.Service, MetaID, MetaRaftAddr)
		}
		out = append(out, planner.Peer{ID: m[MetaID], RaftAddr: m[MetaRaftAddr], HTTPAddr: m[MetaHTTPAddr]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// WaitPeers polls until at least expect servers are registered or ctx ends.
func (c Consul) WaitPeers(ctx context.Context, expect int) ([]planner.Peer, error) {
	return waitPeers(ctx, "consul", c.Service, expect, c.Peers)
}

// waitPeers polls list until it returns at least expect peers or ctx ends.
func waitPeers(ctx context.Context, catalog, service string, expect int, list func(context.Context) ([]planner.Peer, error)) ([]planner.Peer, error) {
	for {
		ps, err := list(ctx)
		if err == nil && len(ps) >= expect {
			return ps, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s: waiting for %d %s servers (have %d, last error %v): %w", catalog, expect, service, len(ps), err, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}
