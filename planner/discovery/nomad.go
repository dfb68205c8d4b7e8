package discovery

import (
	"context"
	"fmt"
	"sort"
	"strings"

	nomad "github.com/hashicorp/nomad/api"

	"github.com/trident-sched/trident/planner"
)

// Nomad discovers planner servers in Nomad's native service catalog (a job's service block
// with provider = "nomad", which registers each allocation). Nomad services carry no meta,
// so every instance states its raft ID, raft address and API URL as tags
// "raft_id=<id>", "raft_addr=<host:port>" and "http_addr=<url>" (see
// jobs/planner.nomad.hcl). Nomad registers the instances; a server only reads them.
type Nomad struct {
	// Client talks to the Nomad API.
	Client *nomad.Client
	// Service is the Nomad service name (e.g. "trident-planner").
	Service string
}

// Peers lists the registered servers, sorted by ID.
func (n Nomad) Peers(ctx context.Context) ([]planner.Peer, error) {
	regs, _, err := n.Client.Services().Get(n.Service, (&nomad.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("nomad: list service %s: %w", n.Service, err)
	}
	var out []planner.Peer
	for _, r := range regs {
		tags := map[string]string{}
		for _, t := range r.Tags {
			if k, v, ok := strings.Cut(t, "="); ok {
				tags[k] = v
			}
		}
		if tags[MetaID] == "" || tags[MetaRaftAddr] == "" {
			return nil, fmt.Errorf("nomad: instance %s of %s (alloc %s) lacks the tags %s=<id> and %s=<host:port>", r.ID, n.Service, r.AllocID, MetaID, MetaRaftAddr)
		}
		out = append(out, planner.Peer{ID: tags[MetaID], RaftAddr: tags[MetaRaftAddr], HTTPAddr: tags[MetaHTTPAddr]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// WaitPeers polls until at least expect servers are registered or ctx ends.
func (n Nomad) WaitPeers(ctx context.Context, expect int) ([]planner.Peer, error) {
	return waitPeers(ctx, "nomad", n.Service, expect, n.Peers)
}
