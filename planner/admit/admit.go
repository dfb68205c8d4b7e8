// Package admit is the admission policy for pipelines sharing one cluster (issue #24): which
// pipelines run now and which batch pipelines wait in a queue, in which order they are
// admitted, and a discrete-event simulation of the policy over a stream of batch jobs.
// It is free of Nomad and raft types, so the live planner and the benchmark run the same
// code; whether a set of pipelines fits, and at which rates they run, is the caller's
// resource model, passed in as a callback.
//
// # Model
//
// A service (non-batch pipeline) runs until it is deleted and is never queued: services are
// admitted first, by Weight (highest first); one whose minimums do not fit beside the
// services admitted before it is reported Short, and is still the caller's to run on what
// is left. A batch pipeline (finite input) that is already running is never preempted. A
// waiting batch pipeline is admitted when its minimums fit beside everything admitted so
// far, and is queued otherwise, never failed.
//
// # Order
//
// Waiting batch pipelines are ordered shortest-expected-job-first with linear aging. The
// expected job time of pipeline j is E_j = Remaining_j / Throughput_j seconds, and its
// score at time t is
//
//	score_j(t) = E_j/w_j − a·(t − Since_j)
//
// (w_j its Weight, 1 by default, so that with weights the order is Smith's rule for the
// weighted mean completion time; a the Policy's Aging), lowest first. A pipeline whose
// Remaining or Throughput is unknown (0) is given the longest known E among the waiting
// pipelines and sorts after the known ones at equal score: at equal waiting it is last, and
// it ages like every other pipeline, so it cannot starve either. Policy FIFO orders by Since
// instead. Ties are broken by Since, then Name.
//
// Both scores fall at the same rate a, so the order of two waiting pipelines never changes
// while they wait: j sorts before k iff E_j/w_j + a·Since_j < E_k/w_k + a·Since_k. Aging
// interpolates between SJF (a = 0) and FIFO (a → ∞); the default a = 1 means a pipeline is
// passed only by pipelines that arrive less than its own expected time (E_j/w_j) after it.
//
// # Backfill and the starvation bound
//
// Admission is backfilling by default: a waiting batch pipeline whose minimums do not fit is
// queued and the walk goes on, so a smaller pipeline behind it that fits starts now instead
// of leaving the resources idle. Backfill alone can starve a wide pipeline (a stream of
// narrow ones keeps taking what is freed), so a waiting pipeline becomes due once its score
// reaches 0, i.e. once it has waited E_j/(a·w_j) seconds; a due pipeline that does not fit
// reserves: no batch pipeline after it in the order is admitted in that round, so what the
// running pipelines free accumulates until it fits. Due pipelines form a prefix of the SJF
// order (a pipeline before a due one has a lower score, hence is due too). Policy.Strict
// makes every non-fitting pipeline reserve (head-of-line blocking, no backfill).
//
// Bound. Assume a > 0, fits is monotone (a superset of a set that does not fit does not fit
// either), no service is short and every pipeline fits beside the services, E_j ≤ E_max
// while j waits, running pipelines finish, and a round runs whenever one does. Let D_j = Since_j + E_max/(a·w_j). A pipeline arriving after D_j sorts
// after j (its score is at least −a·(t − arrival) > score_j(t)), and from D_j on j is due, so
// no pipeline after j is admitted before it. Hence j waits at most
//
//	W_j ≤ E_max/(a·w_j) + Σ_{k ∈ R ∪ A} T_k
//
// where R are the pipelines running at D_j, A the (finitely many) pipelines that arrived
// before D_j and sort before j, and T_k their running times: every one of them runs once
// and then j is first and fits. With a ≤ 0 (aging disabled) neither holds: pure SJF with
// backfill starves long and wide pipelines under a stream of short ones.
//
// # Marginal admission
//
// In the joint round the admitted pipelines share the cluster, and each holds its
// operators' minimum instances: past a few pipelines, a newly admitted one only adds
// minimums that take what the others ran on, and every admitted pipeline slows down (in
// bench cluster -admission 20x4, seed 1: 8 admitted pipelines ran at 8-14 % of their speed
// alone each, 0.83 in sum, where 2 carried 1.19). Policy.Marginal (set by the planner
// unless -admit-marginal=false) admits a waiting batch
// pipeline beside running or just admitted batch pipelines only when the joint round with
// it carries more normalised work, Σ_p T_p/Talone_p, than without it (AdmitWork; 0.1 %
// slack for solver tolerances); otherwise it waits. With nothing but services admitted, a
// batch pipeline that fits is admitted whatever its gain. The shortest job then runs at a
// larger share instead of sharing the cluster with everything that fits, which is what
// lets the SJF order cut the mean completion time.
//
// Reservations under Policy.Marginal hold back only what would delay the reserved
// pipeline (as EASY backfilling does): a due pipeline h refused (for no gain, or because it
// does not fit) reserves, and a batch pipeline k after it in the order is admitted (if it
// passes its own test) only when h would still be admitted beside the services, every
// batch pipeline started since h became due (Pipeline.Started; running ones of unknown
// start count) and k. A pipeline that needs other resources than h (another device class,
// cores h does not use) passes; one that would leave h without room or gain waits. Without
// Marginal there are no work rates to tell them apart, and a reservation holds back every
// batch pipeline after it. The bound holds with one more assumption, that a pipeline's
// gain beside a set does not fall when members of the set finish: once the pipelines in
// R ∪ A have finished, the batch pipelines still running all started after D_j and were
// each admitted only with j admissible beside them and those started before them, so j,
// now first in the order, is admitted.
//
// # Simulation
//
// Simulate replays a stream of batch jobs through Admit against a caller's RatesFunc (the
// resource model: whether a set's minimums fit, and each member's rate), re-admitting at every
// arrival and completion, and reports per-job waits and completion times, their mean and p95,
// and the makespan. SimConfig.Window holds arrivals until the end of a submission window, as
// seed 001 does (15 s).
package admit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
)

// Discipline is the order in which waiting batch pipelines are admitted.
type Discipline string

const (
	// SJF admits the shortest expected job first (Remaining/Throughput), with aging.
	SJF Discipline = "sjf"
	// FIFO admits in the order the pipelines started waiting (Since).
	FIFO Discipline = "fifo"
)

// DefaultAging is the Aging of a Policy that leaves it 0: one second of expected job time
// forgiven per second waited, so a pipeline is passed only by pipelines that arrive within
// its own expected time after it, and reserves the cluster once it has waited that long.
const DefaultAging = 1.0

// NoAging disables aging (pure SJF, no reservation): long or wide batch pipelines can
// starve. For comparisons only.
const NoAging = -1.0

// ErrInvalid is wrapped by every error about malformed input (pipelines, jobs, policy).
var ErrInvalid = errors.New("invalid admission input")

// Policy is how waiting batch pipelines are ordered and admitted. The zero Policy is SJF
// with DefaultAging and backfill.
type Policy struct {
	// Order is SJF ("" means SJF) or FIFO.
	Order Discipline
	// Aging is the seconds of expected job time forgiven per second waited (a in the
	// package documentation): 0 means DefaultAging, negative disables aging and with it the
	// reservation of due pipelines. It must be finite.
	Aging float64
	// Strict disables backfill: a waiting batch pipeline that does not fit holds back every
	// batch pipeline after it (the FCFS baselines of seed 001 are FIFO and Strict).
	Strict bool
	// Marginal admits a waiting batch pipeline beside running or just admitted batch
	// pipelines only when the joint round with it carries more normalised work than
	// without it (AdmitWork): when their minimums already take what it would run on, it
	// waits instead of slowing them all. A due pipeline refused, for no gain or for not
	// fitting, reserves, and holds back only the batch pipelines after it that it would
	// not be admitted beside (package documentation). Requires AdmitWork.
	Marginal bool
}

// aging returns the effective aging rate a ≥ 0.
func (p Policy) aging() float64 {
	switch {
	case p.Aging == 0:
		return DefaultAging
	case p.Aging < 0:
		return 0
	}
	return p.Aging
}

// validate reports a malformed policy.
func (p Policy) validate() error {
	switch p.Order {
	case "", SJF, FIFO:
	default:
		return fmt.Errorf("%w: policy order %q (want %q or %q)", ErrInvalid, p.Order, SJF, FIFO)
	}
	if math.IsNaN(p.Aging) || math.IsInf(p.Aging, 0) {
		return fmt.Errorf("%w: policy aging %v", ErrInvalid, p.Aging)
	}
	return nil
}

// Pipeline is one pipeline as admission sees it.
type Pipeline struct {
	// Name identifies the pipeline (unique, non-empty).
	Name string
	// Batch marks a finite input: only batch pipelines queue.
	Batch bool
	// Running marks a batch pipeline admitted earlier and still running: admission is
	// non-preemptive, so it is kept like a service. Ignored for services.
	Running bool
	// Weight is the priority (≥ 0, 0 means 1): services are admitted by Weight, highest
	// first; a batch pipeline's expected time is divided by it under SJF.
	Weight float64
	// Remaining is the input records left (≥ 0; 0 means unknown).
	Remaining float64
	// Throughput is the planned records/s when admitted, the pipeline's share of the cluster
	// (≥ 0; 0 means unknown).
	Throughput float64
	// Since is when the pipeline started waiting (its registration); the zero time counts
	// as now.
	Since time.Time
	// Started is, for a running batch pipeline, when it was admitted or any later time (the
	// zero time counts as now). Under Policy.Marginal a pipeline admitted after a waiting
	// one became due must leave room for it (see the package documentation); a later
	// Started only makes that check stricter.
	Started time.Time
}

// Result is one admission round.
type Result struct {
	// Order is every pipeline's name in admission order (see Order).
	Order []string
	// Admitted are the pipelines whose minimums fit together, in admission order: services,
	// running batch pipelines and the batch pipelines admitted now.
	Admitted []string
	// Queued are the batch pipelines that wait, in queue order.
	Queued []string
	// Short are the services and running batch pipelines whose minimums do not fit beside
	// those admitted before them. They are not queued (the caller keeps running them on what
	// is left), but while any pipeline is short no waiting batch pipeline is admitted.
	Short []string
	// Position is each queued pipeline's 1-based position in the queue.
	Position map[string]int
	// Reason says why each queued or short pipeline is not admitted. A waiting pipeline
	// checked and refused also gets, with aging on and not Strict, when it becomes due
	// ("due after 30.0s of waiting") or that it is due and reserves the cluster. Reasons
	// hold no quantity that changes while nothing else does (not the time waited).
	Reason map[string]string
}

// FitsFunc is the caller's resource check: whether the minimums of the pipelines named in
// admitted fit on the cluster together. It must not retain admitted.
type FitsFunc func(ctx context.Context, admitted []string) (bool, error)

// class of a pipeline, in admission order.
const (
	service = iota
	running
	waiting
)

// entry is one pipeline with the quantities the order needs.
type entry struct {
	Pipeline
	class  int
	weight float64 // effective weight (> 0)
	known  bool    // Remaining and Throughput known
	waited float64 // seconds since Since (≥ 0)
	score  float64 // E/w − a·waited (batch)
}

// due reports whether a waiting pipeline has waited long enough to reserve the cluster.
func (e entry) due(a float64) bool { return a > 0 && e.score <= 0 }

// dueAfter is the waiting time (seconds) at which a waiting pipeline becomes due under
// aging a > 0: E/(a·w). It does not grow with the wait, so a queue reason that names it
// stays the same from round to round (the planner records the queue only when it changes).
func (e entry) dueAfter(a float64) float64 { return e.waited + e.score/a }

// rank validates ps and returns them as entries in admission order.
func rank(ps []Pipeline, now time.Time, pol Policy) ([]entry, error) {
	if err := pol.validate(); err != nil {
		return nil, err
	}
	a := pol.aging()
	es := make([]entry, len(ps))
	seen := make(map[string]bool, len(ps))
	maxE := 0.0 // longest known expected time among waiting pipelines
	for i, p := range ps {
		if err := validPipeline(p, seen); err != nil {
			return nil, err
		}
		e := entry{Pipeline: p, weight: p.Weight, known: p.Remaining > 0 && p.Throughput > 0}
		if e.weight == 0 {
			e.weight = 1
		}
		switch {
		case !p.Batch:
			e.class = service
		case p.Running:
			e.class = running
		default:
			e.class = waiting
			if e.known {
				maxE = max(maxE, p.Remaining/p.Throughput)
			}
		}
		if !p.Since.IsZero() {
			e.waited = max(0, now.Sub(p.Since).Seconds())
		}
		es[i] = e
	}
	for i := range es {
		e := &es[i]
		if e.class == service {
			continue
		}
		exp := maxE // unknown: as long as the longest known waiting pipeline
		if e.known {
			exp = e.Remaining / e.Throughput
		}
		e.score = exp/e.weight - a*e.waited
	}
	fifo := pol.Order == FIFO
	slices.SortStableFunc(es, func(x, y entry) int {
		if c := cmp.Compare(x.class, y.class); c != 0 {
			return c
		}
		if x.class == service {
			if c := cmp.Compare(y.weight, x.weight); c != 0 {
				return c
			}
		} else if !fifo {
			if c := cmp.Compare(x.score, y.score); c != 0 {
				return c
			}
			if x.known != y.known {
				if x.known {
					return -1
				}
				return 1
			}
		}
		if c := x.Since.Compare(y.Since); c != 0 {
			return c
		}
		return cmp.Compare(x.Name, y.Name)
	})
	return es, nil
}

// validPipeline reports a malformed pipeline or a repeated name (recorded in seen).
func validPipeline(p Pipeline, seen map[string]bool) error {
	if p.Name == "" {
		return fmt.Errorf("%w: pipeline with an empty name", ErrInvalid)
	}
	if seen[p.Name] {
		return fmt.Errorf("%w: pipeline %q listed twice", ErrInvalid, p.Name)
	}
	seen[p.Name] = true
	for _, f := range []struct {
		name string
		v    float64
	}{{"weight", p.Weight}, {"remaining", p.Remaining}, {"throughput", p.Throughput}} {
		if !(f.v >= 0) || math.IsInf(f.v, 0) {
			return fmt.Errorf("%w: pipeline %q: %s %v (want finite, ≥ 0)", ErrInvalid, p.Name, f.name, f.v)
		}
	}
	return nil
}

// Order returns the names of ps in admission order at time now: services first, by Weight
// (highest first); then running batch pipelines; then waiting batch pipelines by the
// policy (SJF with aging, or FIFO; see the package documentation). Ties are broken by
// Since, then Name, so the order is deterministic. It fails, wrapping ErrInvalid, on a
// malformed policy or pipeline.
func Order(ps []Pipeline, now time.Time, pol Policy) ([]string, error) {
	es, err := rank(ps, now, pol)
	if err != nil {
		return nil, fmt.Errorf("admit: order: %w", err)
	}
	names := make([]string, len(es))
	for i, e := range es {
		names[i] = e.Name
	}
	return names, nil
}

// Admit runs one admission round at time now. It walks the pipelines in Order and calls
// fits with each candidate appended to the pipelines admitted so far (one call per
// pipeline checked, in order, never concurrently): services and running batch pipelines
// that fit are admitted and those that do not are Short; a waiting batch pipeline that fits
// is admitted, one that does not is queued. While any pipeline is short, and after a
// non-fitting pipeline that is due (or any non-fitting one under Policy.Strict), the
// remaining batch pipelines are queued without a check. Admit is deterministic given a
// deterministic fits; it stops with ctx's error when ctx is done and wraps fits's errors.
func Admit(ctx context.Context, ps []Pipeline, now time.Time, pol Policy, fits FitsFunc) (Result, error) {
	if fits == nil {
		return Result{}, fmt.Errorf("admit: %w: nil fits", ErrInvalid)
	}
	if pol.Marginal {
		return Result{}, fmt.Errorf("admit: %w: Policy.Marginal needs AdmitWork", ErrInvalid)
	}
	return AdmitWork(ctx, ps, now, pol, func(ctx context.Context, admitted []string) (bool, float64, error) {
		ok, err := fits(ctx, admitted)
		return ok, 0, err
	})
}

// WorkFunc is the caller's resource model for AdmitWork: whether the minimums of the
// pipelines named in admitted fit together (as FitsFunc) and, when they do, the
// normalised work rate the joint round gives them: Σ_p T_p / Talone_p, each pipeline's
// throughput in units of its throughput alone on the cluster. It must not retain admitted.
type WorkFunc func(ctx context.Context, admitted []string) (fits bool, work float64, err error)

// marginalSlack is the relative gain in normalised work below which Policy.Marginal
// refuses a pipeline (solver tolerances aside, no gain).
const marginalSlack = 1e-3

// AdmitWork is Admit with a resource model that also reports the joint round's work
// rate, for Policy.Marginal: a waiting batch pipeline that fits is still queued when a
// batch pipeline is already admitted (running, or admitted earlier in this walk) and the
// work rate with it exceeds the work rate without it by no more than 0.1 %; a batch
// pipeline after a due one refused in the walk is admitted only if the due one would
// still be admitted beside it (two more calls of work per reservation and candidate).
func AdmitWork(ctx context.Context, ps []Pipeline, now time.Time, pol Policy, work WorkFunc) (Result, error) {
	es, err := rank(ps, now, pol)
	if err != nil {
		return Result{}, fmt.Errorf("admit: %w", err)
	}
	if work == nil {
		return Result{}, fmt.Errorf("admit: %w: nil work", ErrInvalid)
	}
	a := pol.aging()
	cur, batch := 0.0, false // work rate of r.Admitted; whether it holds a batch pipeline
	r := Result{Order: make([]string, 0, len(es)), Position: map[string]int{}, Reason: map[string]string{}}
	var held string // why the remaining waiting pipelines are held back, "" if they are not
	var services []string
	var reserved []reservation // due pipelines refused in this walk (Policy.Marginal)
	type started struct {
		name string
		at   time.Time
	}
	var batches []started // admitted batch pipelines and when they started (now if admitted now)
	for _, e := range es {
		r.Order = append(r.Order, e.Name)
		if e.class == waiting {
			if held == "" && len(r.Short) > 0 {
				held = fmt.Sprintf("held while %q is short of its minimums", r.Short[0])
			}
			if held != "" {
				r.queue(e.Name, held)
				continue
			}
		}
		if err := ctx.Err(); err != nil {
			return Result{}, fmt.Errorf("admit: %w", err)
		}
		ok, w, err := work(ctx, append(slices.Clip(r.Admitted), e.Name))
		if err != nil {
			return Result{}, fmt.Errorf("admit: fits check for %q: %w", e.Name, err)
		}
		gainless := ok && pol.Marginal && e.class == waiting && batch && w <= cur*(1+marginalSlack)
		if ok && !gainless && e.class == waiting {
			for _, h := range reserved {
				// h must stay admissible beside every batch pipeline started since it
				// became due (they may outlast those it waits for) and e
				set := slices.Clone(services)
				for _, b := range batches {
					if !b.at.Before(h.dueAt) {
						set = append(set, b.name)
					}
				}
				free, err := h.spares(ctx, work, append(set, e.Name))
				if err != nil {
					return Result{}, fmt.Errorf("admit: %q beside the reservation for %q: %w", e.Name, h.name, err)
				}
				if !free {
					r.queue(e.Name, fmt.Sprintf("reserved for %q (due after %ss of waiting), which would not be admitted beside it", h.name, seconds(h.dueAfter)))
					break
				}
			}
			if r.Position[e.Name] > 0 {
				continue
			}
		}
		switch {
		case ok && !gainless:
			r.Admitted = append(r.Admitted, e.Name)
			cur, batch = w, batch || e.class != service
			switch {
			case e.class == service:
				services = append(services, e.Name)
			case e.class == running && !e.Started.IsZero():
				batches = append(batches, started{e.Name, e.Started})
			default:
				batches = append(batches, started{e.Name, now})
			}
		case e.class != waiting:
			r.Short = append(r.Short, e.Name)
			r.Reason[e.Name] = fmt.Sprintf("minimums do not fit beside the %d pipelines admitted before it", len(r.Admitted))
		default:
			why := fmt.Sprintf("minimums do not fit beside the %d admitted pipelines", len(r.Admitted))
			if gainless {
				why = fmt.Sprintf("would add no throughput beside the %d admitted pipelines (normalised work %.3g, %.3g with it)",
					len(r.Admitted), cur, w)
			}
			switch {
			case pol.Strict:
				held = fmt.Sprintf("behind %q (strict order)", e.Name)
			case e.due(a) && pol.Marginal:
				why += "; due: reserves the cluster (a batch pipeline passes it only if it would still be admitted beside it)"
				reserved = append(reserved, reservation{name: e.Name, dueAfter: e.dueAfter(a),
					dueAt: now.Add(time.Duration((e.dueAfter(a) - e.waited) * float64(time.Second)))})
			case e.due(a):
				why += "; due: reserves the cluster (no batch pipeline after it is admitted)"
				held = fmt.Sprintf("reserved for %q (due after %ss of waiting)", e.Name, seconds(e.dueAfter(a)))
			case a > 0:
				why += fmt.Sprintf("; due after %ss of waiting", seconds(e.dueAfter(a)))
			}
			r.queue(e.Name, why)
		}
	}
	return r, nil
}

// reservation is a due batch pipeline refused in an AdmitWork walk under Policy.Marginal:
// a batch pipeline after it is admitted only if it leaves room for it.
type reservation struct {
	name     string
	dueAfter float64   // seconds of waiting after which it became due
	dueAt    time.Time // when it became due
}

// spares reports whether the reserved pipeline h would be admitted beside set (the
// services, the batch pipelines started since h became due, and the candidate): it fits
// and adds normalised work beside them, as the marginal test asks.
func (h reservation) spares(ctx context.Context, work WorkFunc, set []string) (bool, error) {
	ok, without, err := work(ctx, set)
	if err != nil || !ok {
		return false, err
	}
	ok, with, err := work(ctx, append(slices.Clip(set), h.name))
	if err != nil || !ok {
		return false, err
	}
	return with > without*(1+marginalSlack), nil
}

// queue appends name to the queue with its reason.
func (r *Result) queue(name, reason string) {
	r.Queued = append(r.Queued, name)
	r.Position[name] = len(r.Queued)
	r.Reason[name] = reason
}

// seconds formats s for a reason.
func seconds(s float64) string { return strconv.FormatFloat(s, 'f', 1, 64) }
