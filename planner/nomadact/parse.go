// Package nomadact is the planner's Nomad actuator: it parses pipelines from a job's group
// meta, reads the cluster inventory and turns committed decisions into job versions.
//
// # Placement: one task group per operator, node and configuration generation
//
// Nomad's count + spread/affinity cannot pin "k instances on node n" exactly, so the actuator
// renders every operator group "<op>" of the user's job file into groups named
// "<op>@<node>.g<generation>", each with `constraint { attribute = "${node.unique.name}"
// value = "<node>" }` and count = the instances the plan puts there on that configuration.
// The generation is the operator's config epoch: instances on the current config run in
// generation g, those on the pending candidate config in g+1 (group meta trident_config
// and trident_config_epoch tell the operator which config to run and which epoch label to
// export). A config transition therefore never restarts an instance in place: it grows
// the g+1 groups and shrinks the g groups.
//
// Each operator also keeps its user-written group under its own name as an anchor: count 0,
// the user's scaling policy intact (minimum lowered to 0), so that the Nomad Autoscaler's
// policy for the operator survives every version (see anchor).
//
// # Transitions: surge (canary) then promote, auto-revert on failure
//
// A decision with transitions is applied in two job versions. The "surge" version adds
// the new-config instances (the canaries) next to the old ones: all old ones where the
// node has room, as many as fit where it has not, so old instances are then replaced in
// place (see Render). A Nomad deployment with health_check = "task_states",
// min_healthy_time, healthy_deadline and auto_revert gates them. Only when that deployment
// is successful does the "final" version remove the remaining old-config instances
// (scale-down drains gracefully: the task's kill_timeout, default Options.KillTimeout,
// lets an operator finish in-flight records). When the surge deployment fails, Nomad
// reverts to the last stable version and Step reports the decision failed, after which
// the FSM drops the candidate. A candidate config that does not fit the accelerator is
// failed early: once one of its instances has been OOM-killed Options.OOMAbortAfter times
// (Nomad's oom_killed flag, exit status 137, or a non-zero exit whose stderr matches
// Options.OOMLogPattern), Step fails the deployment itself (`nomad deployment fail`,
// which triggers the auto-revert) instead of leaving it to restart until the healthy
// deadline. Decisions without transitions go straight to the final version.
//
// Nomad's canary stanza is not used for transitions: promoting canaries replaces every
// allocation of the group, and a new job version stops the unpromoted canaries of the
// previous deployment (the reconciler's cancelUnneededCanaries), so neither can hold the
// per-node split of old- and new-config instances that the MILP plans between rounds.
//
// # Idempotence
//
// Every version carries the decision's raft index in its anchor groups' meta
// trident_decision (and trident_phase); only there, because Nomad replaces the
// allocations of any group whose combined meta changes. Step reads the job, its versions and deployments, and performs only the
// next missing action; registrations use the job's modify index (EnforceRegister), so a
// deposed leader racing a new one cannot overwrite a newer version.
package nomadact

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"github.com/hashicorp/nomad/api"

	"github.com/trident-sched/trident/apm/opcontract"
	"github.com/trident-sched/trident/planner/fsm"
	"github.com/trident-sched/trident/strategy/configspace"
)

// Meta keys the actuator writes.
const (
	// MetaDecision (anchor group meta) is the raft index of the decision a version
	// applies. It lives only on the count-0 anchor groups: Nomad replaces every allocation
	// whose combined job+group+task meta changed (a destructive update), so a per-decision
	// value in job meta or in a running group's meta would restart the whole pipeline on
	// every decision.
	MetaDecision = "trident_decision"
	// MetaPhase (anchor group meta) is "surge" or "final".
	MetaPhase = "trident_phase"
	// MetaOperator (group meta) is the operator a rendered group belongs to.
	MetaOperator = opcontract.MetaOperator
	// MetaNode (group meta) is the node a rendered group is pinned to.
	MetaNode = "trident_node"
	// MetaConfigEpoch (group meta) is the configuration generation of the group.
	MetaConfigEpoch = opcontract.MetaConfigEpoch
	// MetaAnchor (group meta) marks an operator's anchor group (count 0, holds the
	// scaling policy).
	MetaAnchor = "trident_anchor"
	// MetaScalingMin (group meta) is the anchor's original scaling policy minimum.
	MetaScalingMin = "trident_scaling_min"
	// MetaPlanner (anchor group meta) is the ID of the planner cluster whose decision a
	// version applies: decision indexes compare only within one cluster.
	MetaPlanner = "trident_planner"
)

// Phases of a decision.
const (
	PhaseSurge = "surge"
	PhaseFinal = "final"
)

// GroupName is the rendered group of operator op on node at config generation gen.
func GroupName(op, node string, gen uint64) string {
	return fmt.Sprintf("%s@%s.g%d", op, node, gen)
}

// DecodeJob decodes a Nomad job from JSON: either an api.Job or {"Job": api.Job} (the
// output of `nomad job run -output`).
func DecodeJob(raw []byte) (*api.Job, error) {
	var wrap struct {
		Job *api.Job `json:"Job"`
	}
	if err := json.Unmarshal(raw, &wrap); err == nil && wrap.Job != nil && wrap.Job.ID != nil {
		return wrap.Job, nil
	}
	var j api.Job
	if err := json.Unmarshal(raw, &j); err != nil {
		return nil, fmt.Errorf("decode nomad job JSON: %w", err)
	}
	if j.ID == nil || *j.ID == "" {
		return nil, fmt.Errorf("decode nomad job JSON: no job ID")
	}
	return &j, nil
}

// plannerMeta are the group meta keys the actuator writes (see "Meta keys the actuator
// writes"). A job file must not set them: the actuator recognises its rendered groups and
// anchors by them (a user group with trident_operator would be taken for a rendered group
// of that operator and duplicated under its own name).
var plannerMeta = []string{MetaDecision, MetaPhase, MetaOperator, MetaNode, MetaAnchor, MetaScalingMin, MetaPlanner}

// ParseJob reads the pipeline from job's group meta: every group whose meta has
// trident_order is an operator. Errors name the group and meta key; values must be within
// the ranges of fsm.ValidateOperator and fsm.ValidatePipeline.
func ParseJob(job *api.Job) (*fsm.Pipeline, error) {
	if job == nil || job.ID == nil || *job.ID == "" {
		return nil, fmt.Errorf("job has no ID")
	}
	id := *job.ID
	if err := fsm.ValidateJobID(id); err != nil {
		return nil, err
	}
	if rendered(job) {
		return nil, fmt.Errorf("job %q: was rendered by the planner (meta %s is set); register the original job file instead", id, MetaDecision)
	}
	p := &fsm.Pipeline{Job: id}
	if c := distinct(job.Constraints); c != "" {
		return nil, fmt.Errorf("job %q: constraint %s conflicts with the planner's per-node placement (it packs several instances on a node); remove it", id, c)
	}
	// Group names first: the rendered versions keep every group of the job next to the
	// operators' rendered groups, so no name may repeat or look like a rendered one.
	ops := 0
	seen := map[string]int{}
	for i, g := range job.TaskGroups {
		if g == nil || g.Name == nil || *g.Name == "" {
			// Nomad refuses the job ("missing name"), and the renderer cannot keep it.
			return nil, fmt.Errorf("job %q: group %d has no name", id, i+1)
		}
		name := *g.Name
		if j, ok := seen[name]; ok {
			return nil, fmt.Errorf("job %q: groups %d and %d are both named %q", id, j+1, i+1, fsm.Short(name))
		}
		seen[name] = i
		if _, ok := g.Meta[opcontract.MetaOrder]; ok {
			if err := fsm.ValidateOperatorName(name); err != nil {
				return nil, fmt.Errorf("job %q: group %q: %w", id, fsm.Short(name), err)
			}
			ops++
		} else if strings.ContainsRune(name, '@') {
			return nil, fmt.Errorf("job %q: group %q: name contains '@', which is reserved for the groups the planner renders (<op>@<node>.g<generation>)", id, fsm.Short(name))
		}
		for _, k := range plannerMeta {
			if _, ok := g.Meta[k]; ok {
				return nil, fmt.Errorf("job %q: group %q: meta %s is written by the planner; remove it from the job file", id, fsm.Short(name), k)
			}
		}
	}
	if ops > fsm.MaxOperators {
		return nil, fmt.Errorf("job %q: %d operator groups (groups with meta %s): want at most %d", id, ops, opcontract.MetaOrder, fsm.MaxOperators)
	}
	for _, g := range job.TaskGroups {
		if _, ok := g.Meta[opcontract.MetaOrder]; !ok {
			continue
		}
		if c := distinct(g.Constraints); c != "" {
			return nil, fmt.Errorf("job %q group %q: constraint %s conflicts with the planner's per-node placement (it packs several instances on a node); remove it", id, *g.Name, c)
		}
		op, err := parseGroup(*g.Name, g.Meta)
		if err != nil {
			return nil, fmt.Errorf("job %q: %w", id, err)
		}
		// The group's scaling policy bounds the operator's instances.
		if sc := g.Scaling; sc != nil {
			if sc.Min != nil && *sc.Min > 0 {
				op.MinInstances = int(*sc.Min)
			}
			if sc.Max != nil && *sc.Max > 0 {
				op.MaxInstances = int(*sc.Max)
			}
		}
		if len(g.Tasks) == 0 {
			return nil, fmt.Errorf("job %q group %q: operator group has no task", id, *g.Name)
		}
		p.Operators = append(p.Operators, op)
	}
	sort.SliceStable(p.Operators, func(i, j int) bool { return p.Operators[i].Order < p.Operators[j].Order })
	if err := parseShare(job, p); err != nil {
		return nil, err
	}
	if err := fsm.ValidatePipeline(p); err != nil {
		return nil, err
	}
	return p, nil
}

// parseShare reads the pipeline's weight (job meta trident_weight, else the job's priority
// / 50), guaranteed throughput (trident_min_throughput), and whether it is a batch pipeline
// (a batch job, or trident_batch) with its input size (trident_input_records) into p.
func parseShare(job *api.Job, p *fsm.Pipeline) error {
	num := func(key string) (float64, bool, error) {
		v, ok := job.Meta[key]
		if !ok || strings.TrimSpace(v) == "" {
			return 0, false, nil
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return 0, true, fmt.Errorf("job %q: meta %s=%q: not a finite number", p.Job, key, fsm.Short(v))
		}
		return f, true, nil
	}
	w, ok, err := num(opcontract.MetaWeight)
	if err != nil {
		return err
	}
	switch {
	case ok && w <= 0:
		return fmt.Errorf("job %q: meta %s=%v: want a number in (0, %d]", p.Job, opcontract.MetaWeight, w, fsm.MaxWeight)
	case ok:
		p.Weight = w
	case job.Priority != nil && *job.Priority > 0:
		p.Weight = float64(*job.Priority) / 50
	}
	m, _, err := num(opcontract.MetaMinThroughput)
	if err != nil {
		return err
	}
	p.MinThroughput = m
	if p.InputRecords, _, err = num(opcontract.MetaInputRecords); err != nil {
		return err
	}
	p.Batch = job.Type != nil && *job.Type == api.JobTypeBatch
	if v, ok := job.Meta[opcontract.MetaBatch]; ok {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("job %q: meta %s=%q: want true or false", p.Job, opcontract.MetaBatch, fsm.Short(v))
		}
		p.Batch = b
	}
	return nil
}

// distinct names the first distinct_hosts or distinct_property constraint of cs ("" if
// none).
func distinct(cs []*api.Constraint) string {
	for _, c := range cs {
		if c != nil && (c.Operand == api.ConstraintDistinctHosts || c.Operand == api.ConstraintDistinctProperty) {
			return c.Operand
		}
	}
	return ""
}

func parseGroup(name string, meta map[string]string) (fsm.Operator, error) {
	o := fsm.Operator{Name: name, Amplification: 1}
	// Every trident_* value is bounded before any is parsed (sorted: the first too long
	// key is named deterministically).
	keys := make([]string, 0, len(meta))
	for k := range meta {
		if strings.HasPrefix(k, "trident_") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		if n := len(meta[k]); n > fsm.MaxMetaValueBytes {
			return o, fmt.Errorf("group %q: meta %s is %d bytes long: want at most %d", name, fsm.Short(k), n, fsm.MaxMetaValueBytes)
		}
	}
	var err error
	field := func(key string, required bool, parse func(string) error) {
		if err != nil {
			return
		}
		v, ok := meta[key]
		if !ok || strings.TrimSpace(v) == "" {
			if required {
				err = fmt.Errorf("group %q: meta %s is required", name, key)
			}
			return
		}
		if perr := parse(strings.TrimSpace(v)); perr != nil {
			err = fmt.Errorf("group %q: meta %s=%q: %s", name, key, fsm.Short(v), fsm.Clip(perr.Error(), 512))
		}
	}
	intp := func(dst *int) func(string) error {
		return func(s string) error {
			n, e := strconv.Atoi(s)
			if e != nil {
				return fmt.Errorf("not an integer")
			}
			*dst = n
			return nil
		}
	}
	floatp := func(dst *float64) func(string) error {
		return func(s string) error {
			f, e := strconv.ParseFloat(s, 64)
			if e != nil {
				return fmt.Errorf("not a number")
			}
			*dst = f
			return nil
		}
	}
	field(opcontract.MetaOrder, true, intp(&o.Order))
	field(opcontract.MetaCPU, true, floatp(&o.CPU))
	field(opcontract.MetaMemoryMB, true, intp(&o.MemoryMB))
	field(opcontract.MetaGPUs, false, intp(&o.GPUs))
	field(opcontract.MetaGPUMemoryMB, false, intp(&o.GPUMemoryMB))
	field(opcontract.MetaOutputBytes, false, floatp(&o.OutputBytes))
	field(opcontract.MetaAmplification, false, floatp(&o.Amplification))
	field(opcontract.MetaColdStartSec, false, floatp(&o.ColdStartSec))
	field(opcontract.MetaCapacity, false, floatp(&o.CapacityHint))
	field(opcontract.MetaSynchronous, false, func(s string) error {
		b, e := opcontract.ParseSynchronous(s)
		if e != nil {
			return fmt.Errorf("not true or false")
		}
		o.Synchronous = b
		return nil
	})
	field(opcontract.MetaGPUModels, false, func(s string) error {
		ms, e := ParseGPUModels(s)
		o.GPUModels = ms
		return e
	})
	field(opcontract.MetaGPUVendor, false, func(s string) error {
		v, e := ParseGPUVendor(s)
		o.GPUVendor = v
		return e
	})
	field(opcontract.MetaContention, false, func(s string) error {
		cs, e := ParseContention(s)
		o.Contention = cs
		return e
	})
	field(opcontract.MetaFeatures, false, func(s string) error {
		o.Features = opcontract.ParseFeatures(s)
		return nil
	})
	var space *configspace.Space
	field(opcontract.MetaParams, false, func(s string) error {
		sp, e := configspace.Parse(s)
		if e != nil {
			return e
		}
		space, o.Params = sp, s
		return nil
	})
	if err != nil {
		return o, err
	}
	o.Config = strings.TrimSpace(meta[opcontract.MetaConfig])
	if space != nil {
		if o.Config == "" {
			o.Config = space.Default().String()
		} else if c, e := space.ParseConfig(o.Config); e != nil {
			return o, fmt.Errorf("group %q: meta %s=%q: %s", name, opcontract.MetaConfig, fsm.Short(o.Config), fsm.Clip(e.Error(), 512))
		} else {
			o.Config = c.String()
		}
	} else if c, e := opcontract.ParseConfig(o.Config); e != nil {
		// Without a parameter space the config is opaque to the tuner, but the actuator
		// still renders it into per-parameter meta, so it must be k=v.
		return o, fmt.Errorf("group %q: meta %s=%q: %s", name, opcontract.MetaConfig, fsm.Short(o.Config), fsm.Clip(e.Error(), 512))
	} else {
		o.Config = opcontract.FormatConfig(c) // canonical, as with a space (",a=1" is "a=1")
	}
	if verr := fsm.ValidateOperator(o); verr != nil {
		return o, fmt.Errorf("group %q: %w", name, verr)
	}
	return o, nil
}

// CheckConfig validates config against the operator's parameter space.
func CheckConfig(op fsm.Operator, config string) error {
	if strings.TrimSpace(config) == "" {
		return fmt.Errorf("operator %q: config is empty", op.Name)
	}
	if op.Params == "" {
		if _, err := opcontract.ParseConfig(config); err != nil {
			return fmt.Errorf("operator %q: %w", op.Name, err)
		}
		return nil
	}
	sp, err := configspace.Parse(op.Params)
	if err != nil {
		return fmt.Errorf("operator %q: %s: %w", op.Name, opcontract.MetaParams, err)
	}
	if _, err := sp.ParseConfig(config); err != nil {
		return fmt.Errorf("operator %q: config %q: %w", op.Name, config, err)
	}
	return nil
}

// stateMeta returns the meta in which the actuator records a rendered version's decision
// and phase: the first anchor group's, or the job's for versions written by planners that
// kept it there (nil for a job the planner did not render).
func stateMeta(job *api.Job) map[string]string {
	if job == nil {
		return nil
	}
	for _, g := range job.TaskGroups {
		if g != nil && g.Meta[MetaAnchor] == "true" {
			return g.Meta
		}
	}
	if _, ok := job.Meta[MetaDecision]; ok {
		return job.Meta
	}
	return nil
}

// rendered reports whether the planner rendered job.
func rendered(job *api.Job) bool { return stateMeta(job) != nil }

// DecisionOf returns the raft index of the decision job applies (0 if none).
func DecisionOf(job *api.Job) uint64 {
	n, _ := strconv.ParseUint(stateMeta(job)[MetaDecision], 10, 64)
	return n
}

// PlannerOf returns the ID of the planner cluster that rendered job ("" if unknown).
func PlannerOf(job *api.Job) string { return stateMeta(job)[MetaPlanner] }

// PhaseOf returns the phase (PhaseSurge or PhaseFinal) of the version job is ("" if the
// planner did not render it).
func PhaseOf(job *api.Job) string { return stateMeta(job)[MetaPhase] }

// ParseContention parses trident_contention: comma-separated kind[:weight] entries
// ("network", "io:0.4"), blanks trimmed; a kind from opcontract.ContentionKinds, listed
// once, and a weight in [fsm.MinContentionWeight, 1], 1 when omitted.
func ParseContention(s string) ([]fsm.Contention, error) {
	var out []fsm.Contention
	for _, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		kind, w, hasW := strings.Cut(e, ":")
		kind = strings.ToLower(strings.TrimSpace(kind))
		if !slices.Contains(opcontract.ContentionKinds(), kind) {
			return nil, fmt.Errorf("kind %q: want one of %s", fsm.Short(kind), strings.Join(opcontract.ContentionKinds(), ", "))
		}
		c := fsm.Contention{Kind: kind, Weight: 1}
		if hasW {
			f, err := strconv.ParseFloat(strings.TrimSpace(w), 64)
			if err != nil {
				return nil, fmt.Errorf("%s weight %q: not a number", kind, fsm.Short(w))
			}
			if !(f >= fsm.MinContentionWeight && f <= 1) {
				return nil, fmt.Errorf("%s weight %v: want a share of the node's resource in [%v, 1]", kind, f, fsm.MinContentionWeight)
			}
			c.Weight = f
		}
		if slices.ContainsFunc(out, func(d fsm.Contention) bool { return d.Kind == kind }) {
			return nil, fmt.Errorf("kind %q listed twice", kind)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no kind listed")
	}
	return out, nil
}

// ParseGPUVendor parses trident_gpu_vendor: a Nomad device vendor as device plugins
// fingerprint it ("nvidia", "amd", "intel"; case is kept, blanks around it trimmed): 1-64
// bytes of letters, digits, '-', '_' and '.'. The vendor the planner assumes without it
// (fsm.DefaultGPUVendor) is returned as "".
func ParseGPUVendor(s string) (string, error) {
	v := strings.TrimSpace(s)
	if v == "" || len(v) > 64 {
		return "", fmt.Errorf("want a device vendor of 1-64 bytes, e.g. nvidia or amd")
	}
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return "", fmt.Errorf("vendor %q: %q is not a letter, digit, '-', '_' or '.'", fsm.Short(v), r)
		}
	}
	if v == fsm.DefaultGPUVendor {
		return "", nil
	}
	return v, nil
}

// MaxGPUModels bounds the models an operator lists in trident_gpu_models.
const MaxGPUModels = 32

// ParseGPUModels parses trident_gpu_models: comma-separated model names (Nomad's device
// names, e.g. "NVIDIA A100-SXM4-80GB"), blanks around them trimmed; at least one and at
// most MaxGPUModels, each of printable characters and at most 128 bytes.
func ParseGPUModels(s string) ([]string, error) {
	var out []string
	for _, m := range strings.Split(s, ",") {
		m = strings.TrimSpace(m)
		if m == "" {
			continue
		}
		if len(m) > 128 {
			return nil, fmt.Errorf("model %q is %d bytes long: want at most 128", fsm.Short(m), len(m))
		}
		for _, r := range m {
			if !unicode.IsPrint(r) {
				return nil, fmt.Errorf("model %q contains the non-printable character %q", fsm.Short(m), r)
			}
		}
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	switch {
	case len(out) == 0:
		return nil, fmt.Errorf("no model listed")
	case len(out) > MaxGPUModels:
		return nil, fmt.Errorf("%d models listed: want at most %d", len(out), MaxGPUModels)
	}
	return out, nil
}
