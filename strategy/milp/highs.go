package milp

/*
#include <stdint.h>
#include <stdlib.h>

// Declarations of the HiGHS 1.13 C API functions used here. The static libhighs is
// linked by the blank import of github.com/bartolsthoorn/gohighs/highs (its cgo LDFLAGS);
// that wrapper does not expose starting solutions or interrupts, hence this thin layer.
typedef int HighsInt;

typedef struct HighsCallbackDataOut {
  void* cbdata;
  int log_type;
  double running_time;
  HighsInt simplex_iteration_count;
  HighsInt ipm_iteration_count;
  HighsInt pdlp_iteration_count;
  double objective_function_value;
  int64_t mip_node_count;
  int64_t mip_total_lp_iterations;
  double mip_primal_bound;
  double mip_dual_bound;
  double mip_gap;
  double* mip_solution;
  HighsInt mip_solution_size;
  HighsInt cutpool_num_col;
  HighsInt cutpool_num_cut;
  HighsInt cutpool_num_nz;
  HighsInt* cutpool_start;
  HighsInt* cutpool_index;
  double* cutpool_value;
  double* cutpool_lower;
  double* cutpool_upper;
  HighsInt external_solution_query_origin;
} HighsCallbackDataOut;

typedef struct HighsCallbackDataIn {
  int user_interrupt;
  double* user_solution;
  void* cbdata;
  int user_has_solution;
  HighsInt user_solution_size;
} HighsCallbackDataIn;

typedef void (*HighsCCallbackType)(int, const char*, const HighsCallbackDataOut*, HighsCallbackDataIn*, void*);

void* Highs_create(void);
void Highs_destroy(void* highs);
HighsInt Highs_passMip(void* highs, const HighsInt num_col, const HighsInt num_row, const HighsInt num_nz,
	const HighsInt a_format, const HighsInt sense, const double offset, const double* col_cost,
	const double* col_lower, const double* col_upper, const double* row_lower, const double* row_upper,
	const HighsInt* a_start, const HighsInt* a_index, const double* a_value, const HighsInt* integrality);
HighsInt Highs_setBoolOptionValue(void* highs, const char* option, const HighsInt value);
HighsInt Highs_setIntOptionValue(void* highs, const char* option, const HighsInt value);
HighsInt Highs_setDoubleOptionValue(void* highs, const char* option, const double value);
HighsInt Highs_setStringOptionValue(void* highs, const char* option, const char* value);
HighsInt Highs_setSolution(void* highs, const double* col_value, const double* row_value,
	const double* col_dual, const double* row_dual);
HighsInt Highs_setCallback(void* highs, HighsCCallbackType user_callback, void* user_callback_data);
HighsInt Highs_startCallback(void* highs, const HighsInt callback_type);
HighsInt Highs_run(void* highs);
HighsInt Highs_getModelStatus(const void* highs);
HighsInt Highs_getSolution(const void* highs, double* col_value, double* col_dual, double* row_value, double* row_dual);
HighsInt Highs_getDoubleInfoValue(const void* highs, const char* info, double* value);
HighsInt Highs_getIntInfoValue(const void* highs, const char* info, HighsInt* value);
double Highs_getInfinity(const void* highs);

// The interrupt state lives in C memory: the watchdog goroutine sets flag, the HiGHS
// thread polls it from the interrupt callbacks. The MIP callback also stops a run whose
// incumbent is proven within rel_gap by the run's own dual bound, or reaches enough, and
// a run whose dual bound falls to cutoff (it cannot beat a plan already held):
// HiGHS checks its gap only between its root-node loops and branch-and-bound nodes, and on
// badly scaled models its root separation and sub-MIP heuristics run on for seconds
// after the incumbent is good enough (rel_gap, enough and cutoff are set once, before
// the run).
typedef struct { int flag; int gap_stop; double rel_gap; double enough; double cutoff; } trident_cbdata;
static void trident_interrupt_cb(int type, const char* msg, const HighsCallbackDataOut* out,
	HighsCallbackDataIn* in, void* user) {
	trident_cbdata* d = (trident_cbdata*)user;
	if (in == 0) return;
	if (__atomic_load_n(&d->flag, __ATOMIC_RELAXED)) { in->user_interrupt = 1; return; }
	if (type != 6 || out == 0) return; // kCallbackMipInterrupt
	double p = out->mip_primal_bound, b = out->mip_dual_bound; // maximisation: p <= b
	if (d->cutoff > 0 && b <= d->cutoff) { d->gap_stop = 1; in->user_interrupt = 1; return; }
	if (!(p > -1e300 && p < 1e300)) return; // no incumbent yet
	if ((d->enough > 0 && p >= d->enough) || (b < 1e300 && b - p <= d->rel_gap * (b > 0 ? b : -b))) {
		d->gap_stop = 1;
		in->user_interrupt = 1;
	}
}
static HighsInt trident_install_interrupt(void* highs, trident_cbdata* d) {
	HighsInt s = Highs_setCallback(highs, trident_interrupt_cb, d);
	if (s < 0) return s;
	Highs_startCallback(highs, 1); // simplex
	Highs_startCallback(highs, 2); // ipm
	return Highs_startCallback(highs, 6); // mip
}
static void trident_set_flag(trident_cbdata* d) { __atomic_store_n(&d->flag, 1, __ATOMIC_RELAXED); }

// trident_release returns the C heap's free memory to the system after a solve. glibc keeps
// what a solve freed in the arena of the thread that ran it; without a milp.Thread, solves
// run on whichever OS thread the Go scheduler hands them, each with its own arena: measured
// on 400 solves of a 16-node instance, the process's private memory settled near 19-20 MB
// without the trim and 12-14 MB with it, and a planner leader's RSS kept a solve's peak for
// good. Elsewhere a no-op.
#if defined(__GLIBC__)
#include <malloc.h>
static void trident_release(void) { malloc_trim(0); }
#else
static void trident_release(void) {}
#endif
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"slices"
	"time"
	"unsafe"

	_ "github.com/bartolsthoorn/gohighs/highs" // links the static libhighs
)

// HiGHS model status codes (kHighsModelStatus*).
const (
	hsOptimal    = 7
	hsInfeasible = 8
	hsTimeLimit  = 13
	hsInterrupt  = 17
)

// HiGHS solves the model with the HiGHS MILP solver through cgo, in phases that share
// the time limit (search.go): the greedy plan and the aggregate bound; the LP relaxation,
// whose optimum is a proven bound and which guides the next starts; the greedy placement
// re-routed by an LP and topped up into local pipelines (fill.go), LP rounding and RENS
// (HiGHS on the model with every integer column restricted to the floor or ceiling of its
// LP value); the move search (move.go) and, on clusters of 64 nodes or more, the
// node-neighbourhood search (lns.go: HiGHS on the placement of a few nodes at a time);
// then HiGHS on the full model from the best start. Whenever the best plan is
// proven within Options.RelGap of the best bound, the solve stops. Every HiGHS run has the
// relative gap and a time limit set, runs on a locked OS thread and is interrupted by a
// watchdog at its deadline or when ctx ends, or by its own MIP callback once its incumbent
// is proven within its gap (HiGHS checks that only between its root loops and nodes).
type HiGHS struct {
	// Logger receives debug lines per solve and phase; nil uses slog.Default().
	Logger *slog.Logger
	// Thread, when set, runs every HiGHS call of the solve on that one OS thread, taking
	// turns with other solves that share it; nil runs each call on a locked OS thread of
	// its own. A long-running process should share one Thread (see Thread).
	Thread *Thread
}

// highsResult is what one HiGHS run returns.
type highsResult struct {
	status      int
	values      []float64
	dualBound   float64
	objective   float64
	err         error
	interrupted bool
	// enough reports a MIP run stopped by its callback because its incumbent was proven
	// within the gap or reached Options.enough (not by the clock or ctx).
	enough bool
	// rowDual are the row duals of an LP (a model without integer columns) solved to a
	// feasible dual solution, else nil.
	rowDual []float64
}

// Solve implements Solver.
func (h HiGHS) Solve(ctx context.Context, p *Problem, opts Options) (*Solution, error) {
	start := time.Now()
	log := h.Logger
	if log == nil {
		log = slog.Default()
	}
	opts = opts.withDefaults()
	opts.thread = h.Thread
	q, err := newPrep(p)
	if err != nil {
		return nil, err
	}
	deadline := start.Add(opts.TimeLimit)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	s := &search{ctx: ctx, q: q, opts: opts, log: log, start: start, deadline: deadline, bound: math.Inf(1)}
	s.run()
	sol := s.best
	sol.Bound = s.bound
	sol.Gap = relGap(sol.Bound, sol.Objective)
	// "optimal" is a property of the returned plan: its own gap to the proven bound, not
	// any HiGHS status (which describes HiGHS's incumbent, possibly not the plan returned)
	switch {
	case provenWithin(sol.Gap, opts.RelGap):
		sol.Status = StatusOptimal
	case sol.Source == "highs":
		sol.Status = StatusFeasible
	default:
		sol.Status = StatusHeuristic
	}
	sol.SolveTime = time.Since(start)
	if err := Validate(p, sol); err != nil {
		return nil, fmt.Errorf("milp: %s solution rejected by the checker: %w", sol.Source, err)
	}
	return sol, nil
}

// decodeSlack is the relative throughput that decoding a solver incumbent may give up to
// absorb the solver's feasibility tolerances (assemble); a plan whose gap exceeds RelGap by
// no more than this is still reported optimal when HiGHS proved RelGap.
const decodeSlack = 1e-7

// provenWithin reports whether gap proves the requested relative gap.
func provenWithin(gap, relGap float64) bool { return gap <= relGap+decodeSlack }

// withDefaults fills zero Options fields.
func (o Options) withDefaults() Options {
	if o.RelGap <= 0 {
		o.RelGap = DefaultRelGap
	}
	if o.TimeLimit <= 0 {
		o.TimeLimit = DefaultTimeLimit
	}
	if o.Threads <= 0 {
		o.Threads = 1
	}
	return o
}

// runHiGHS solves m on opts.thread, or else on a locked OS thread in its own goroutine. A
// call waiting for a busy opts.thread gives up at the deadline or when ctx ends, without
// running. Once HiGHS runs, a watchdog raises the interrupt flag at the deadline (HiGHS
// overshoots its own time_limit) or when ctx ends; if HiGHS still has not returned after
// a grace period, runHiGHS returns without it and the thread frees the HiGHS instance
// when the C call finally comes back.
func runHiGHS(ctx context.Context, m *lp, start []float64, opts Options, deadline time.Time) highsResult {
	return runHiGHSWith(ctx, m, start, opts, deadline, false)
}

// runHiGHSWith is runHiGHS; with interior, an LP is solved by the interior-point method
// without crossover (a point in the relative interior of the optimal face, not a vertex).
func runHiGHSWith(ctx context.Context, m *lp, start []float64, opts Options, deadline time.Time, interior bool) highsResult {
	cb := (*C.trident_cbdata)(C.calloc(1, C.size_t(unsafe.Sizeof(C.trident_cbdata{}))))
	cb.rel_gap, cb.enough, cb.cutoff = C.double(opts.RelGap), C.double(opts.enough), C.double(opts.cutoff)
	done := make(chan highsResult, 1)
	run := func() { done <- solveHiGHS(m, start, opts, deadline, interior, cb) }
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	if t := opts.thread; t == nil {
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			run()
		}()
	} else if err := t.submit(ctx, timer.C, run); err != nil {
		C.free(unsafe.Pointer(cb))
		return highsResult{err: fmt.Errorf("highs: %w", err), interrupted: true}
	}
	var interrupted bool
	select {
	case r := <-done:
		C.free(unsafe.Pointer(cb))
		return r
	case <-timer.C:
	case <-ctx.Done():
	}
	C.trident_set_flag(cb)
	interrupted = true
	grace := time.NewTimer(250*time.Millisecond + opts.TimeLimit/10)
	defer grace.Stop()
	select {
	case r := <-done:
		C.free(unsafe.Pointer(cb))
		r.interrupted = interrupted
		return r
	case <-grace.C:
		go func() { <-done; C.free(unsafe.Pointer(cb)) }()
		return highsResult{err: errors.New("highs did not stop after the interrupt"), interrupted: true}
	}
}

// solveHiGHS runs one HiGHS instance to completion; it must run on a locked OS thread.
func solveHiGHS(m *lp, start []float64, opts Options, deadline time.Time, interior bool, cb *C.trident_cbdata) highsResult {
	h := C.Highs_create()
	if h == nil {
		return highsResult{err: errors.New("highs: create failed")}
	}
	defer C.trident_release() // after the destroy below (defers run last in, first out)
	defer C.Highs_destroy(h)
	setB := func(k string, v bool) {
		ck := C.CString(k)
		defer C.free(unsafe.Pointer(ck))
		b := C.HighsInt(0)
		if v {
			b = 1
		}
		C.Highs_setBoolOptionValue(h, ck, b)
	}
	setI := func(k string, v int) {
		ck := C.CString(k)
		defer C.free(unsafe.Pointer(ck))
		C.Highs_setIntOptionValue(h, ck, C.HighsInt(v))
	}
	setD := func(k string, v float64) {
		ck := C.CString(k)
		defer C.free(unsafe.Pointer(ck))
		C.Highs_setDoubleOptionValue(h, ck, C.double(v))
	}
	setB("output_flag", opts.Verbose)
	hInf := float64(C.Highs_getInfinity(h))
	clip := func(v float64) C.double {
		switch {
		case v >= hInf:
			return C.double(hInf)
		case v <= -hInf:
			return C.double(-hInf)
		}
		return C.double(v)
	}
	nc, nr, nz := len(m.cost), m.numRows(), len(m.index)
	// C arrays (cgo forbids passing Go memory holding Go pointers; these are plain numbers,
	// but allocating them in C keeps the rules trivially satisfied)
	dbl := func(n int) []C.double {
		if n == 0 {
			n = 1
		}
		return unsafe.Slice((*C.double)(C.malloc(C.size_t(n)*C.size_t(unsafe.Sizeof(C.double(0))))), n)
	}
	ints := func(n int) []C.HighsInt {
		if n == 0 {
			n = 1
		}
		return unsafe.Slice((*C.HighsInt)(C.malloc(C.size_t(n)*C.size_t(unsafe.Sizeof(C.HighsInt(0))))), n)
	}
	cost, lo, up, integ := dbl(nc), dbl(nc), dbl(nc), ints(nc)
	rlo, rup, ast, aix, aval := dbl(nr), dbl(nr), ints(nr+1), ints(nz), dbl(nz)
	defer func() {
		for _, pp := range []unsafe.Pointer{unsafe.Pointer(&cost[0]), unsafe.Pointer(&lo[0]), unsafe.Pointer(&up[0]),
			unsafe.Pointer(&integ[0]), unsafe.Pointer(&rlo[0]), unsafe.Pointer(&rup[0]), unsafe.Pointer(&ast[0]),
			unsafe.Pointer(&aix[0]), unsafe.Pointer(&aval[0])} {
			C.free(pp)
		}
	}()
	for j := range nc {
		cost[j], lo[j], up[j] = C.double(m.cost[j]), clip(m.colLo[j]), clip(m.colUp[j])
		integ[j] = 0
		if m.integer[j] {
			integ[j] = 1
		}
	}
	for r := range nr {
		rlo[r], rup[r], ast[r] = clip(m.rowLo[r]), clip(m.rowUp[r]), C.HighsInt(m.start[r])
	}
	for k := range nz {
		aix[k], aval[k] = C.HighsInt(m.index[k]), C.double(m.value[k])
	}
	if st := C.Highs_passMip(h, C.HighsInt(nc), C.HighsInt(nr), C.HighsInt(nz), 2 /*row-wise*/, -1, /*maximise*/
		C.double(m.offset), &cost[0], &lo[0], &up[0], &rlo[0], &rup[0], &ast[0], &aix[0], &aval[0], &integ[0]); st < 0 {
		return highsResult{err: fmt.Errorf("highs: passMip status %d", int(st))}
	}
	setI("threads", opts.Threads)
	setI("random_seed", 1)
	setD("mip_rel_gap", opts.RelGap)
	if interior { // an LP solved to the relative interior of its optimal face
		setS := func(k, v string) {
			ck, cv := C.CString(k), C.CString(v)
			defer C.free(unsafe.Pointer(ck))
			defer C.free(unsafe.Pointer(cv))
			C.Highs_setStringOptionValue(h, ck, cv)
		}
		setS("solver", "ipm")
		setS("run_crossover", "off")
	}
	setD("time_limit", math.Max(0.01, time.Until(deadline).Seconds()))
	if st := C.trident_install_interrupt(h, cb); st < 0 {
		return highsResult{err: fmt.Errorf("highs: setCallback status %d", int(st))}
	}
	if start != nil {
		sv := dbl(nc)
		for j := range nc {
			sv[j] = C.double(start[j])
		}
		C.Highs_setSolution(h, &sv[0], nil, nil, nil)
		C.free(unsafe.Pointer(&sv[0]))
	}
	runStatus := C.Highs_run(h)
	res := highsResult{status: int(C.Highs_getModelStatus(h))}
	if runStatus < 0 {
		res.err = fmt.Errorf("highs: run status %d (model status %d)", int(runStatus), res.status)
		return res
	}
	getD := func(k string) float64 {
		ck := C.CString(k)
		defer C.free(unsafe.Pointer(ck))
		var v C.double
		if C.Highs_getDoubleInfoValue(h, ck, &v) < 0 {
			return math.NaN()
		}
		return float64(v)
	}
	getI := func(k string) int {
		ck := C.CString(k)
		defer C.free(unsafe.Pointer(ck))
		var v C.HighsInt
		C.Highs_getIntInfoValue(h, ck, &v)
		return int(v)
	}
	res.objective = getD("objective_function_value")
	res.dualBound = getD("mip_dual_bound")
	res.enough = res.status == hsInterrupt && cb.gap_stop != 0 // written by the callback on this thread
	res.interrupted = res.status == hsInterrupt && !res.enough
	if getI("primal_solution_status") == 2 { // kHighsSolutionStatusFeasible
		vals := dbl(nc)
		C.Highs_getSolution(h, &vals[0], nil, nil, nil)
		res.values = make([]float64, nc)
		for j := range nc {
			res.values[j] = float64(vals[j])
		}
		C.free(unsafe.Pointer(&vals[0]))
		if !slices.Contains(m.integer, true) && getI("dual_solution_status") == 2 {
			vals, duals := dbl(nc), dbl(nr)
			C.Highs_getSolution(h, &vals[0], nil, nil, &duals[0])
			res.rowDual = make([]float64, nr)
			for r := range nr {
				res.rowDual[r] = float64(duals[r])
			}
			C.free(unsafe.Pointer(&vals[0]))
			C.free(unsafe.Pointer(&duals[0]))
		}
	}
	return res
}
