package plugin

import (
	"context"
	"fmt"
	"math"
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
	opts := profile.Options{Model: strings.TrimSpace(meta[opcontract.MetaMetricsModel])}
	if v := strings.TrimSpace(meta[opcontract.MetaPoolNeed]); v != "" {
		need, err := strconv.ParseFloat(v, 64)
		if err != nil || !(need > 0) || math.IsInf(need, 0) {
			return groupProfile{}, fmt.Errorf("trident-apm: job %q group %q: meta %s = %q: want a positive number (vLLM: max_model_len)", job, group, opcontract.MetaPoolNeed, v)
		}
		opts.PoolNeed = need
	}
	gp = groupProfile{prof: prof, opts: opts, at: time.Now()}
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

// allocFacts is what the plugin reads once from an allocation: its config epoch from its
// group's meta (trident_config_epoch; 0 when unset; the epoch of instances whose metrics
// do not carry it, e.g. server profiles; epochErr when the meta is malformed) and the node
// and devices it holds. An allocation's meta and devices never change (Nomad replaces
// allocations whose meta changes), so the facts are cached by allocation ID.
type allocFacts struct {
	epoch    float64
	epochErr error
	devices  allocDevices
	// admission is the group's max_num_seqs parameter (trident_param_max_num_seqs): the
	// most requests a serving engine runs at once; 0 when unset or not a number.
	admission float64
}

// readAlloc reads allocID's facts.
func readAlloc(ctx context.Context, cl *api.Client, allocID string) (allocFacts, error) {
	al, _, err := cl.Allocations().Info(allocID, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return allocFacts{}, fmt.Errorf("trident-apm: read allocation %s: %w", allocID, err)
	}
	f := allocFacts{devices: devicesOf(al)}
	if al.Job == nil {
		f.epochErr = fmt.Errorf("trident-apm: allocation %s carries no job", allocID)
		return f, nil
	}
	tg := al.Job.LookupTaskGroup(al.TaskGroup)
	if tg == nil {
		f.epochErr = fmt.Errorf("trident-apm: allocation %s: its job has no group %q", allocID, al.TaskGroup)
		return f, nil
	}
	if v, err := strconv.ParseFloat(strings.TrimSpace(tg.Meta[opcontract.ParamMetaKey("max_num_seqs")]), 64); err == nil && v > 0 && !math.IsInf(v, 0) {
		f.admission = v
	}
	if v := strings.TrimSpace(tg.Meta[opcontract.MetaConfigEpoch]); v != "" {
		e, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			f.epochErr = fmt.Errorf("trident-apm: allocation %s group %q: meta %s=%q: not an epoch", allocID, al.TaskGroup, opcontract.MetaConfigEpoch, v)
		}
		f.epoch = float64(e)
	}
	return f, nil
}

// allocsOf returns the facts of every allocation of snap, read once per allocation and
// cached per group (the cache keeps the allocations of the latest snapshot only). An
// allocation that cannot be read is missing, with an error.
func (p *Plugin) allocsOf(ctx context.Context, cl *api.Client, k string, snap *snapshot) (map[string]allocFacts, []error) {
	p.mu.Lock()
	cache := p.allocs[k]
	p.mu.Unlock()
	next := map[string]allocFacts{}
	var errs []error
	for id := range snap.instances {
		f, ok := cache[id]
		if !ok {
			var err error
			if f, err = readAlloc(ctx, cl, id); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		next[id] = f
	}
	p.mu.Lock()
	p.allocs[k] = next
	p.mu.Unlock()
	return next, errs
}

// fillEpochs sets the epoch of every instance of snap that does not export one from its
// allocation's meta; an instance whose allocation cannot be read (or whose epoch meta is
// malformed) is dropped from the snapshot (its samples would carry a wrong epoch) with
// an error.
func fillEpochs(facts map[string]allocFacts, snap *snapshot) []error {
	var errs []error
	for id, m := range snap.instances {
		if m.HasEpoch {
			continue
		}
		f, ok := facts[id]
		if !ok || f.epochErr != nil {
			if ok {
				errs = append(errs, f.epochErr)
			}
			delete(snap.instances, id)
			continue
		}
		m.Epoch = f.epoch
		snap.instances[id] = m
	}
	return errs
}

// admissionLimits returns each instance's admission limit (allocFacts.admission) for the
// instances whose engine reports its running and waiting counts.
func admissionLimits(facts map[string]allocFacts, snap *snapshot) map[string]float64 {
	out := map[string]float64{}
	for id, m := range snap.instances {
		if f, ok := facts[id]; ok && m.EngineReported && f.admission > 0 {
			out[id] = f.admission
		}
	}
	return out
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
