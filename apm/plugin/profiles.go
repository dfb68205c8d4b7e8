package plugin

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/trident-sched/trident/apm/opcontract"
	"github.com/trident-sched/trident/apm/profile"
)

// profileTTL is how long a group's metrics profile (read from its job's meta) is reused
// before the job is read again.
const profileTTL = time.Minute

// groupProfile is the metrics profile of one job/group and when it was read.
type groupProfile struct {
	prof profile.Profile
	opts profile.Options
	at   time.Time
}

// metricsProfile returns the profile job/group's instances are scraped with: group meta
// trident_metrics_profile (default trident) and trident_metrics_model, read from the job
// at most every profileTTL.
func (p *Plugin) metricsProfile(ctx context.Context, cl *api.Client, job, group string) (groupProfile, error) {
	k := key(job, group)
	p.mu.Lock()
	gp, ok := p.profiles[k]
	p.mu.Unlock()
	if ok && time.Since(gp.at) < profileTTL {
		return gp, nil
	}
	meta, err := groupMeta(ctx, cl, job, group)
	if err != nil {
		return groupProfile{}, err
	}
	prof, err := profile.Lookup(meta[opcontract.MetaMetricsProfile])
	if err != nil {
		return groupProfile{}, fmt.Errorf("trident-apm: job %q group %q: meta %s: %w", job, group, opcontract.MetaMetricsProfile, err)
	}
	gp = groupProfile{prof: prof, opts: profile.Options{Model: strings.TrimSpace(meta[opcontract.MetaMetricsModel])}, at: time.Now()}
	p.mu.Lock()
	p.profiles[k] = gp
	p.mu.Unlock()
	return gp, nil
}

// groupMeta returns the meta of job's group: the group named group, or a planner-rendered
// group ("<op>@<node>.g<epoch>") whose trident_operator is group.
func groupMeta(ctx context.Context, cl *api.Client, job, group string) (map[string]string, error) {
	j, _, err := cl.Jobs().Info(job, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		if strings.Contains(err.Error(), "404") {
			return nil, fmt.Errorf("trident-apm: unknown job %q", job)
		}
		return nil, fmt.Errorf("trident-apm: read job %q: %w", job, err)
	}
	for _, tg := range j.TaskGroups {
		if tg.Name != nil && (*tg.Name == group || tg.Meta[opcontract.MetaOperator] == group) {
			return tg.Meta, nil
		}
	}
	return nil, fmt.Errorf("trident-apm: job %q has no group %q", job, group)
}

// allocEpoch reads the config epoch of an allocation from its group's meta
// (trident_config_epoch; 0 when unset): the epoch of instances whose metrics do not carry
// it (server profiles). An allocation's meta never changes (Nomad replaces allocations
// whose meta changes), so the value can be cached by allocation ID.
func allocEpoch(ctx context.Context, cl *api.Client, allocID string) (float64, error) {
	al, _, err := cl.Allocations().Info(allocID, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return 0, fmt.Errorf("trident-apm: read allocation %s: %w", allocID, err)
	}
	if al.Job == nil {
		return 0, fmt.Errorf("trident-apm: allocation %s carries no job", allocID)
	}
	tg := al.Job.LookupTaskGroup(al.TaskGroup)
	if tg == nil {
		return 0, fmt.Errorf("trident-apm: allocation %s: its job has no group %q", allocID, al.TaskGroup)
	}
	v := strings.TrimSpace(tg.Meta[opcontract.MetaConfigEpoch])
	if v == "" {
		return 0, nil
	}
	e, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("trident-apm: allocation %s group %q: meta %s=%q: not an epoch", allocID, al.TaskGroup, opcontract.MetaConfigEpoch, v)
	}
	return float64(e), nil
}

// fillEpochs sets the epoch of every instance of snap that does not export one from its
// allocation's meta, caching it per group; an instance whose allocation cannot be read is
// dropped from the snapshot (its samples would carry a wrong epoch) with an error.
func (p *Plugin) fillEpochs(ctx context.Context, cl *api.Client, k string, snap *snapshot) []error {
	p.mu.Lock()
	cache := p.epochs[k]
	p.mu.Unlock()
	next := map[string]float64{}
	var errs []error
	for id, m := range snap.instances {
		if m.HasEpoch {
			continue
		}
		e, ok := cache[id]
		if !ok {
			var err error
			if e, err = allocEpoch(ctx, cl, id); err != nil {
				errs = append(errs, err)
				delete(snap.instances, id)
				continue
			}
		}
		next[id] = e
		m.Epoch = e
		snap.instances[id] = m
	}
	p.mu.Lock()
	p.epochs[k] = next
	p.mu.Unlock()
	return errs
}

// settle prepares a new snapshot against the previous one (nil for the first): it marks
// instances that restarted since (profile.Restarted) and turns cumulative feature totals
// into interval means (profile.Window).
func settle(prev, cur *snapshot) {
	for id, m := range cur.instances {
		var old *InstanceMetrics
		if prev != nil {
			if o, ok := prev.instances[id]; ok {
				old = &o
				m.Restarted = profile.Restarted(o, m)
			}
		}
		profile.Window(old, &m)
		cur.instances[id] = m
	}
}

// withoutRestarted returns prev without the instances that restarted before cur, so that
// the feed sees them as new (no interval is measured across a restart).
func withoutRestarted(prev, cur snapshot) snapshot {
	out := snapshot{time: prev.time, instances: make(map[string]InstanceMetrics, len(prev.instances))}
	for id, m := range prev.instances {
		if c, ok := cur.instances[id]; ok && c.Restarted {
			continue
		}
		out.instances[id] = m
	}
	return out
}
