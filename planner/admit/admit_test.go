package admit

import (
	"context"
	"errors"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// at returns t0 plus s seconds.
func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// batch is a waiting batch pipeline of expected time remaining/throughput, waiting since s.
func batch(name string, remaining, throughput, since float64) Pipeline {
	return Pipeline{Name: name, Batch: true, Remaining: remaining, Throughput: throughput, Since: at(since)}
}

func TestOrder(t *testing.T) {
	withWeight := func(p Pipeline, w float64) Pipeline { p.Weight = w; return p }
	running := func(p Pipeline) Pipeline { p.Running = true; return p }
	svc := func(name string, w, since float64) Pipeline {
		return Pipeline{Name: name, Weight: w, Since: at(since)}
	}
	for _, tc := range []struct {
		name string
		ps   []Pipeline
		now  float64
		pol  Policy
		want []string
	}{
		{
			name: "services first by weight desc, then since, then name",
			ps: []Pipeline{batch("b", 10, 1, 0), svc("s1", 1, 0), svc("s3", 3, 5), svc("s2", 3, 0),
				svc("s0", 0, 0), svc("sa", 1, 0)},
			want: []string{"s2", "s3", "s0", "s1", "sa", "b"}, // weight 0 counts as 1
		},
		{
			name: "sjf by remaining over throughput",
			ps:   []Pipeline{batch("long", 1000, 10, 0), batch("short", 100, 10, 0), batch("mid", 100, 2, 0)},
			want: []string{"short", "mid", "long"},
		},
		{
			name: "weight divides the expected time (Smith's rule)",
			ps:   []Pipeline{batch("a", 100, 1, 0), withWeight(batch("b", 300, 1, 0), 4)},
			want: []string{"b", "a"},
		},
		{
			name: "aging: a long job waiting longer than the difference passes a new short one",
			ps:   []Pipeline{batch("short", 10, 1, 95), batch("long", 100, 1, 0)},
			now:  100, // scores: short 10−5 = 5, long 100−100 = 0
			want: []string{"long", "short"},
		},
		{
			name: "aging: order fixed while both wait (difference of arrivals < difference of E)",
			ps:   []Pipeline{batch("short", 10, 1, 80), batch("long", 100, 1, 0)},
			now:  1e6,
			want: []string{"short", "long"},
		},
		{
			name: "no aging: pure sjf however long the wait",
			ps:   []Pipeline{batch("short", 10, 1, 1e5), batch("long", 100, 1, 0)},
			now:  2e5,
			pol:  Policy{Aging: NoAging},
			want: []string{"short", "long"},
		},
		{
			name: "larger aging weighs waiting more",
			ps:   []Pipeline{batch("short", 10, 1, 30), batch("long", 100, 1, 0)},
			now:  30,
			pol:  Policy{Aging: 4}, // short 10, long 100−120 = −20
			want: []string{"long", "short"},
		},
		{
			name: "unknown remaining or throughput sorts last, fifo among themselves",
			ps: []Pipeline{batch("u2", 0, 5, 0), batch("u1", 50, 0, 0), batch("known-long", 1000, 1, 0),
				batch("known", 10, 1, 0), batch("u0", 0, 0, 0)},
			want: []string{"known", "known-long", "u0", "u1", "u2"},
		},
		{
			name: "unknown alone: fifo by since then name",
			ps:   []Pipeline{batch("c", 0, 0, 2), batch("b", 0, 0, 1), batch("a", 0, 0, 2)},
			now:  10,
			want: []string{"b", "a", "c"},
		},
		{
			name: "unknown ages too: waiting longer than the longest known job puts it ahead",
			ps:   []Pipeline{batch("u", 0, 0, 0), batch("long", 100, 1, 50)},
			now:  60, // u: 100−60 = 40, long: 100−10 = 90
			want: []string{"u", "long"},
		},
		{
			name: "fifo by since then name, whatever the size",
			ps: []Pipeline{batch("short", 1, 1, 3), batch("b", 1e6, 1, 1), batch("a", 0, 0, 1),
				batch("long", 1e6, 1, 0)},
			now:  5,
			pol:  Policy{Order: FIFO},
			want: []string{"long", "a", "b", "short"},
		},
		{
			name: "running batch before waiting batch, after services",
			ps: []Pipeline{batch("short", 1, 1, 0), running(batch("run-long", 1000, 1, 0)), svc("svc", 1, 9),
				running(batch("run-short", 10, 1, 5))},
			now:  10,
			want: []string{"svc", "run-short", "run-long", "short"},
		},
		{
			name: "equal scores: since then name",
			ps:   []Pipeline{batch("b", 10, 1, 0), batch("a", 10, 1, 0), batch("0c", 5, 1, 5)},
			now:  10, // all 0 after aging
			want: []string{"a", "b", "0c"},
		},
		{
			name: "zero since counts as now",
			ps:   []Pipeline{{Name: "z", Batch: true, Remaining: 50, Throughput: 1}, batch("old", 100, 1, 0)},
			now:  60, // z: 50, old: 40
			want: []string{"old", "z"},
		},
		{name: "empty", ps: nil, want: []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Order(tc.ps, at(tc.now), tc.pol)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("Order = %q, want %q", got, tc.want)
			}
		})
	}
}

// capacity is a FitsFunc: a set fits when its pipelines' units sum to at most k. It records
// every set it is asked about.
type capacity struct {
	k     float64
	units map[string]float64
	calls [][]string
}

func (c *capacity) fits(_ context.Context, admitted []string) (bool, error) {
	c.calls = append(c.calls, admitted)
	sum := 0.0
	for _, n := range admitted {
		sum += c.units[n]
	}
	return sum <= c.k, nil
}

func TestAdmit(t *testing.T) {
	svc := func(name string, w float64) Pipeline { return Pipeline{Name: name, Weight: w, Since: at(0)} }
	running := func(p Pipeline) Pipeline { p.Running = true; return p }
	for _, tc := range []struct {
		name     string
		ps       []Pipeline
		units    map[string]float64
		now      float64
		pol      Policy
		admitted []string
		queued   []string
		short    []string
		reason   map[string]string // substrings of Reason
	}{
		{
			name:     "everything fits",
			ps:       []Pipeline{svc("s", 1), batch("a", 10, 1, 0), batch("b", 20, 1, 0)},
			units:    map[string]float64{"s": 3, "a": 3, "b": 4},
			admitted: []string{"s", "a", "b"},
		},
		{
			name:     "sjf: the short job is admitted, the long one queued",
			ps:       []Pipeline{batch("long", 100, 1, 0), batch("short", 10, 1, 1)},
			units:    map[string]float64{"long": 6, "short": 6},
			now:      1,
			admitted: []string{"short"},
			queued:   []string{"long"},
			reason:   map[string]string{"long": "minimums do not fit beside the 1 admitted"},
		},
		{
			name:     "fifo: the first arrival is admitted",
			ps:       []Pipeline{batch("long", 100, 1, 0), batch("short", 10, 1, 1)},
			units:    map[string]float64{"long": 6, "short": 6},
			now:      1,
			pol:      Policy{Order: FIFO},
			admitted: []string{"long"},
			queued:   []string{"short"},
		},
		{
			name: "services never queue: those that do not fit are short, batch waits behind them",
			ps: []Pipeline{svc("big", 5), svc("huge", 3), svc("small", 1), batch("tiny", 1, 1, 0),
				batch("tiny2", 2, 1, 0)},
			units:    map[string]float64{"big": 6, "huge": 8, "small": 2, "tiny": 1, "tiny2": 1},
			admitted: []string{"big", "small"},
			short:    []string{"huge"},
			queued:   []string{"tiny", "tiny2"},
			reason: map[string]string{"huge": "minimums do not fit beside the 1 pipelines admitted before it",
				"tiny": `held while "huge" is short`, "tiny2": `held while "huge" is short`},
		},
		{
			name:     "running batch is not preempted by a shorter waiting one",
			ps:       []Pipeline{running(batch("run", 1000, 1, 0)), batch("short", 1, 1, 5)},
			units:    map[string]float64{"run": 8, "short": 4},
			now:      5,
			admitted: []string{"run"},
			queued:   []string{"short"},
		},
		{
			name:     "a running batch pipeline that no longer fits is short, not queued",
			ps:       []Pipeline{svc("s", 1), running(batch("run", 1000, 1, 0)), batch("w", 1, 1, 5)},
			units:    map[string]float64{"s": 8, "run": 4, "w": 1},
			now:      5,
			admitted: []string{"s"},
			short:    []string{"run"},
			queued:   []string{"w"},
		},
		{
			name: "backfill: a narrow job passes a wide one that is not due",
			// wide: E 100, waited 50 (score 50 > 0, not due); narrow: E 200.
			ps:       []Pipeline{running(batch("r", 10, 1, 0)), batch("wide", 100, 1, 0), batch("narrow", 200, 1, 40)},
			units:    map[string]float64{"r": 4, "wide": 8, "narrow": 2},
			now:      50,
			admitted: []string{"r", "narrow"},
			queued:   []string{"wide"},
			reason:   map[string]string{"wide": "minimums do not fit beside the 1 admitted pipelines; due after 100.0s of waiting"},
		},
		{
			name: "reservation: a due wide job holds back the narrow one behind it",
			// wide waited 100 ≥ E 100: due.
			ps:       []Pipeline{running(batch("r", 10, 1, 0)), batch("wide", 100, 1, 0), batch("narrow", 200, 1, 90)},
			units:    map[string]float64{"r": 4, "wide": 8, "narrow": 2},
			now:      100,
			admitted: []string{"r"},
			queued:   []string{"wide", "narrow"},
			reason:   map[string]string{"narrow": `reserved for "wide" (due after 100.0s of waiting)`, "wide": "due: reserves the cluster"},
		},
		{
			name:     "reservation depends on aging: with aging 0.5 the same job is not due yet",
			ps:       []Pipeline{running(batch("r", 10, 1, 0)), batch("wide", 100, 1, 0), batch("narrow", 200, 1, 90)},
			units:    map[string]float64{"r": 4, "wide": 8, "narrow": 2},
			now:      100,
			pol:      Policy{Aging: 0.5},
			admitted: []string{"r", "narrow"},
			queued:   []string{"wide"},
		},
		{
			name:     "no aging, no reservation",
			ps:       []Pipeline{running(batch("r", 10, 1, 0)), batch("wide", 100, 1, 0), batch("narrow", 200, 1, 90)},
			units:    map[string]float64{"r": 4, "wide": 8, "narrow": 2},
			now:      1e6,
			pol:      Policy{Aging: NoAging},
			admitted: []string{"r", "narrow"},
			queued:   []string{"wide"},
		},
		{
			name:     "strict: a job that does not fit holds back everything after it",
			ps:       []Pipeline{running(batch("r", 10, 1, 0)), batch("wide", 100, 1, 0), batch("narrow", 200, 1, 40)},
			units:    map[string]float64{"r": 4, "wide": 8, "narrow": 2},
			now:      50,
			pol:      Policy{Strict: true},
			admitted: []string{"r"},
			queued:   []string{"wide", "narrow"},
			reason:   map[string]string{"narrow": `behind "wide" (strict order)`},
		},
		{
			name:     "fifo strict: head-of-line blocking (seed 001's FCFS baselines)",
			ps:       []Pipeline{batch("first", 100, 1, 0), batch("second", 1, 1, 1), batch("third", 1, 1, 2)},
			units:    map[string]float64{"first": 12, "second": 1, "third": 1},
			now:      3,
			pol:      Policy{Order: FIFO, Strict: true},
			admitted: nil,
			queued:   []string{"first", "second", "third"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &capacity{k: 10, units: tc.units}
			r, err := Admit(context.Background(), tc.ps, at(tc.now), tc.pol, c.fits)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(r.Admitted, tc.admitted) || !slices.Equal(r.Queued, tc.queued) || !slices.Equal(r.Short, tc.short) {
				t.Fatalf("admitted %q queued %q short %q, want %q %q %q", r.Admitted, r.Queued, r.Short,
					tc.admitted, tc.queued, tc.short)
			}
			order, err := Order(tc.ps, at(tc.now), tc.pol)
			if err != nil || !slices.Equal(r.Order, order) {
				t.Errorf("Result.Order %q, Order %q (%v)", r.Order, order, err)
			}
			for i, n := range r.Queued {
				if r.Position[n] != i+1 {
					t.Errorf("Position[%q] = %d, want %d", n, r.Position[n], i+1)
				}
			}
			if len(r.Position) != len(r.Queued) || len(r.Reason) != len(r.Queued)+len(r.Short) {
				t.Errorf("Position %v Reason %v: one entry per queued (and short) pipeline", r.Position, r.Reason)
			}
			for n, want := range tc.reason {
				if !strings.Contains(r.Reason[n], want) {
					t.Errorf("Reason[%q] = %q, want it to contain %q", n, r.Reason[n], want)
				}
			}
			// Every call is the admitted prefix plus one candidate, each slice its own.
			for i, call := range c.calls {
				for _, prev := range c.calls[i+1:] {
					if len(call) > 0 && len(prev) > 0 && &call[0] == &prev[0] {
						t.Fatalf("fits calls share a backing array")
					}
				}
			}
		})
	}
}

func TestAdmitErrors(t *testing.T) {
	ok := func(context.Context, []string) (bool, error) { return true, nil }
	good := []Pipeline{batch("a", 1, 1, 0)}
	boom := errors.New("boom")
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		ps   []Pipeline
		pol  Policy
		fits FitsFunc
		want error
	}{
		{name: "empty name", ps: []Pipeline{{Batch: true}}, want: ErrInvalid},
		{name: "duplicate", ps: []Pipeline{batch("a", 1, 1, 0), batch("a", 2, 1, 0)}, want: ErrInvalid},
		{name: "NaN weight", ps: []Pipeline{{Name: "a", Weight: math.NaN()}}, want: ErrInvalid},
		{name: "negative weight", ps: []Pipeline{{Name: "a", Weight: -1}}, want: ErrInvalid},
		{name: "negative remaining", ps: []Pipeline{batch("a", -1, 1, 0)}, want: ErrInvalid},
		{name: "infinite throughput", ps: []Pipeline{batch("a", 1, math.Inf(1), 0)}, want: ErrInvalid},
		{name: "unknown order", ps: good, pol: Policy{Order: "lifo"}, want: ErrInvalid},
		{name: "NaN aging", ps: good, pol: Policy{Aging: math.NaN()}, want: ErrInvalid},
		{name: "infinite aging", ps: good, pol: Policy{Aging: math.Inf(1)}, want: ErrInvalid},
		{name: "nil fits", ps: good, want: ErrInvalid},
		{name: "fits error wrapped", ps: good,
			fits: func(context.Context, []string) (bool, error) { return false, boom }, want: boom},
		{name: "canceled", ctx: canceled, ps: good, fits: ok, want: context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			fits := tc.fits
			if fits == nil && tc.name != "nil fits" {
				fits = ok
			}
			_, err := Admit(ctx, tc.ps, t0, tc.pol, fits)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Admit: %v, want %v", err, tc.want)
			}
			if errors.Is(tc.want, ErrInvalid) && tc.name != "nil fits" {
				if _, err := Order(tc.ps, t0, tc.pol); !errors.Is(err, ErrInvalid) {
					t.Fatalf("Order: %v, want %v", err, ErrInvalid)
				}
			}
		})
	}
}

// TestAdmitCancelMidRound: a ctx canceled by the first fits call stops the round before the
// next call.
func TestAdmitCancelMidRound(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := 0
	_, err := Admit(ctx, []Pipeline{batch("a", 1, 1, 0), batch("b", 2, 1, 0)}, t0, Policy{},
		func(context.Context, []string) (bool, error) { calls++; cancel(); return true, nil })
	if !errors.Is(err, context.Canceled) || calls != 1 {
		t.Fatalf("err %v after %d calls, want context.Canceled after 1", err, calls)
	}
}

// TestAdmitWorkMarginal: with Policy.Marginal a waiting batch pipeline that fits is
// still queued when the joint round with it carries no more normalised work than without
// it (here a set carries min(batch pipelines, 2)); the first batch pipeline beside services
// needs no gain; a due pipeline refused so reserves like one that does not fit; Admit
// refuses the policy (it has no work rates).
func TestAdmitWorkMarginal(t *testing.T) {
	work := func(_ context.Context, names []string) (bool, float64, error) {
		n := 0.0
		for _, name := range names {
			if name != "svc" {
				n++
			}
		}
		return true, 1 + min(n, 2), nil // the service carries 1
	}
	svc := Pipeline{Name: "svc", Since: at(0)}
	ps := []Pipeline{svc, batch("a", 10, 1, 0), batch("b", 20, 1, 0), batch("c", 30, 1, 0), batch("d", 40, 1, 0)}
	r, err := AdmitWork(context.Background(), ps, at(1), Policy{Marginal: true}, work)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"svc", "a", "b"}; !slices.Equal(r.Admitted, want) {
		t.Errorf("admitted %v, want %v", r.Admitted, want)
	}
	if want := []string{"c", "d"}; !slices.Equal(r.Queued, want) || !strings.Contains(r.Reason["c"], "would add no throughput") {
		t.Errorf("queued %v (%q), want %v for adding no throughput", r.Queued, r.Reason["c"], want)
	}
	r, err = AdmitWork(context.Background(), ps, at(1), Policy{}, work)
	if err != nil || len(r.Admitted) != 5 {
		t.Errorf("without Marginal: admitted %v (%v), want all 5", r.Admitted, err)
	}
	// nothing runs but a service whose work does not rise: the first batch pipeline starts
	flat := func(_ context.Context, names []string) (bool, float64, error) { return true, 1, nil }
	r, err = AdmitWork(context.Background(), ps[:3], at(1), Policy{Marginal: true}, flat)
	if err != nil || !slices.Equal(r.Admitted, []string{"svc", "a"}) {
		t.Errorf("flat work: admitted %v (%v), want svc and a", r.Admitted, err)
	}
	// two batch pipelines run; c has waited past its expected time (due): refused for no
	// gain, it reserves; b, behind it, would add no throughput either
	run := func(name string) Pipeline { return Pipeline{Name: name, Batch: true, Running: true, Since: at(0)} }
	late := []Pipeline{svc, run("r1"), run("r2"), batch("b", 20, 1, 0), batch("c", 30, 1, -100)}
	r, err = AdmitWork(context.Background(), late, at(1), Policy{Marginal: true}, work)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Admitted, []string{"svc", "r1", "r2"}) || !slices.Equal(r.Queued, []string{"c", "b"}) ||
		!strings.Contains(r.Reason["c"], "would add no throughput") || !strings.Contains(r.Reason["c"], "due: reserves") ||
		!strings.Contains(r.Reason["b"], "would add no throughput") {
		t.Errorf("due c: admitted %v, queued %v, reasons %v", r.Admitted, r.Queued, r.Reason)
	}
	if _, err := Admit(context.Background(), ps, at(1), Policy{Marginal: true}, func(context.Context, []string) (bool, error) { return true, nil }); !errors.Is(err, ErrInvalid) {
		t.Errorf("Admit with Marginal: %v, want ErrInvalid", err)
	}
}

// TestReasonsStable: the queue reasons of waiting pipelines do not change from one round
// to the next while nothing but the time waited does (the planner records the queue in
// raft only when it changes), before and after the wide pipeline becomes due.
func TestReasonsStable(t *testing.T) {
	r := batch("r", 10, 1, 0)
	r.Running = true
	ps := []Pipeline{r, batch("wide", 100, 1, 0), batch("narrow", 200, 1, 90)}
	c := &capacity{k: 10, units: map[string]float64{"r": 4, "wide": 8, "narrow": 2}}
	for _, span := range [][2]float64{{91, 95}, {100, 130}} {
		var reasons []map[string]string
		for _, now := range span {
			r, err := Admit(context.Background(), ps, at(now), Policy{}, c.fits)
			if err != nil {
				t.Fatal(err)
			}
			reasons = append(reasons, r.Reason)
		}
		if !maps.Equal(reasons[0], reasons[1]) {
			t.Errorf("reasons at %v s %v, at %v s %v: want the same", span[0], reasons[0], span[1], reasons[1])
		}
	}
}

// TestReservationSparesOthers: under Policy.Marginal a due pipeline refused for no gain
// holds back only the batch pipelines it could not be admitted beside. Each pipeline uses
// resource classes, shared equally, and runs at its bottleneck share (its alone rate is 1).
// r runs on "a100"; h (due) needs "a100" and "nvme", so it adds nothing beside r and
// reserves. k1 ("l4") leaves room for h and passes it; k2 ("nvme") would add work beside
// r and k1 but h would add none beside k1 and k2, so it is held for h. r started before h
// became due, so h waits for it without counting it; a running pipeline of unknown start
// counts as started now, and then nothing passes h.
func TestReservationSparesOthers(t *testing.T) {
	classes := map[string][]string{"r": {"a100"}, "h": {"a100", "nvme"}, "k1": {"l4"}, "k2": {"nvme"}}
	work := func(_ context.Context, names []string) (bool, float64, error) {
		used := map[string]int{} // pipelines per class
		for _, n := range names {
			for _, c := range classes[n] {
				used[c]++
			}
		}
		w := 0.0
		for _, n := range names {
			rate := 1.0
			for _, c := range classes[n] {
				rate = min(rate, 1/float64(used[c]))
			}
			w += rate
		}
		return true, w, nil
	}
	for _, tc := range []struct {
		started          time.Time
		admitted, queued []string
	}{
		{at(-95), []string{"r", "k1"}, []string{"h", "k2"}}, // h due at -90
		{time.Time{}, []string{"r"}, []string{"h", "k1", "k2"}},
	} {
		run := Pipeline{Name: "r", Batch: true, Running: true, Since: at(-200), Started: tc.started}
		ps := []Pipeline{run, batch("h", 10, 1, -100), batch("k1", 20, 1, 0), batch("k2", 30, 1, 0)}
		r, err := AdmitWork(context.Background(), ps, at(1), Policy{Marginal: true}, work)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(r.Admitted, tc.admitted) || !slices.Equal(r.Queued, tc.queued) {
			t.Errorf("r started %v: admitted %v queued %v (%v), want %v, %v", tc.started, r.Admitted, r.Queued, r.Reason, tc.admitted, tc.queued)
			continue
		}
		if !strings.Contains(r.Reason["h"], "due: reserves") || !strings.Contains(r.Reason["k2"], `reserved for "h"`) {
			t.Errorf("reasons %v: want h reserving and k2 held for it", r.Reason)
		}
	}
}
