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

// The interrupt flag lives in C memory: the watchdog goroutine sets it, the HiGHS thread
// polls it from the interrupt callbacks.
static void trident_interrupt_cb(int type, const char* msg, const HighsCallbackDataOut* out,
	HighsCallbackDataIn* in, void* user) {
	if (in != 0 && __atomic_load_n((int*)user, __ATOMIC_RELAXED)) in->user_interrupt = 1;
}
static HighsInt trident_install_interrupt(void* highs, int* flag) {
	HighsInt s = Highs_setCallback(highs, trident_interrupt_cb, flag);
	if (s < 0) return s;
	Highs_startCallback(highs, 1); // simplex
	Highs_startCallback(highs, 2); // ipm
	return Highs_startCallback(highs, 6); // mip
}
static void trident_set_flag(int* flag) { __atomic_store_n(flag, 1, __ATOMIC_RELAXED); }
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime"
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

// HiGHS solves the model with the HiGHS MILP solver through cgo. It first builds a start:
// the greedy plan, re-routed by an LP with the placement fixed, and an LP-rounding plan
// (floored LP relaxation, greedy top-up, routing LP); if the best start is already within
// Options.RelGap of the aggregate bound it is returned without the MIP. Otherwise HiGHS
// runs from that start (relative gap and time limit set, OS thread locked, a watchdog
// interrupting it at the deadline or when ctx ends). The start is returned when HiGHS
// fails, stops without an incumbent or returns something the checker rejects.
type HiGHS struct {
	// Logger receives one debug line per solve; nil uses slog.Default().
	Logger *slog.Logger
}

// highsResult is what one HiGHS run returns.
type highsResult struct {
	status      int
	values      []float64
	dualBound   float64
	objective   float64
	err         error
	interrupted bool
}

// Solve implements Solver.
func (h HiGHS) Solve(ctx context.Context, p *Problem, opts Options) (*Solution, error) {
	start := time.Now()
	log := h.Logger
	if log == nil {
		log = slog.Default()
	}
	opts = opts.withDefaults()
	q, err := newPrep(p)
	if err != nil {
		return nil, err
	}
	deadline := start.Add(opts.TimeLimit)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	g := q.greedy(ctx)
	finish := func(s *Solution) (*Solution, error) {
		s.SolveTime = time.Since(start)
		if err := Validate(p, s); err != nil {
			return nil, fmt.Errorf("milp: %s solution rejected by the checker: %w", s.Source, err)
		}
		return s, nil
	}
	// proven reports whether a start is already within RelGap of the aggregate bound: then
	// HiGHS would stop at its first gap check, so it is not started at all
	proven := func() bool {
		if !opts.NoBound && !opts.AlwaysMIP && (provenWithin(g.Gap, opts.RelGap) || q.Tub == 0) {
			g.Status = StatusOptimal
			return true
		}
		return false
	}
	if proven() || ctx.Err() != nil {
		return finish(g)
	}
	m := buildModel(q, opts)
	var startVals []float64
	if !opts.NoWarmStart {
		startVals = m.startVector(g)
		// (1) route the greedy placement optimally: the model with its integer columns
		// fixed is an LP, which matters when the network binds; (2) LP rounding
		for _, improve := range []func() *Solution{
			func() *Solution { return m.routeLP(ctx, startVals, opts, deadline) },
			func() *Solution { return m.lpRound(ctx, opts, deadline) },
		} {
			r := improve()
			if r == nil || r.Objective <= g.Objective || Validate(p, r) != nil {
				continue
			}
			log.Debug("milp: start improved", "from", g.Objective, "to", r.Objective)
			r.Status, r.Source, r.Bound = StatusHeuristic, "greedy", q.Tub
			r.Gap = relGap(r.Bound, r.Objective)
			g = r
			startVals = m.startVector(g)
			if proven() {
				return finish(g)
			}
		}
	}
	res := runHiGHS(ctx, &m.lp, startVals, opts, deadline)
	log.Debug("milp: highs finished", "status", res.status, "interrupted", res.interrupted,
		"objective", res.objective, "bound", res.dualBound, "err", res.err, "elapsed", time.Since(start))
	if res.err != nil || res.values == nil || res.status == hsInfeasible {
		if res.err != nil {
			log.Warn("milp: highs failed, using the greedy solution", "err", res.err)
		}
		return finish(g)
	}
	s := m.decode(res.values)
	s.Source = "highs"
	bound := math.Min(q.Tub, res.dualBound)
	if math.IsNaN(bound) {
		bound = q.Tub
	}
	if err := Validate(p, s); err != nil {
		log.Warn("milp: highs solution rejected by the checker, using the start", "err", err)
		s = g
	} else if !opts.NoWarmStart && g.Objective > s.Objective {
		s = g // the start is better than what HiGHS returned (e.g. it stopped early)
	}
	s.Bound = bound
	s.Gap = relGap(s.Bound, s.Objective)
	// "optimal" is a property of the returned plan: its own gap to the proven bound, not
	// HiGHS's status (which describes HiGHS's incumbent, possibly not the plan returned)
	s.Status = StatusFeasible
	if provenWithin(s.Gap, opts.RelGap) {
		s.Status = StatusOptimal
	} else if s.Source == "greedy" {
		s.Status = StatusHeuristic
	}
	return finish(s)
}

// decodeSlack is the relative throughput that decoding a solver incumbent may give up to
// absorb the solver's feasibility tolerances (assemble); a plan whose gap exceeds RelGap by
// no more than this is still reported optimal when HiGHS proved RelGap.
const decodeSlack = 1e-7

// provenWithin reports whether gap proves the requested relative gap.
func provenWithin(gap, relGap float64) bool { return gap <= relGap+decodeSlack }

// routeLP solves the model with every integer column fixed at start (an LP: routing,
// egress and throughput of a fixed placement) within a fifth of the remaining time.
func (m *model) routeLP(ctx context.Context, start []float64, opts Options, deadline time.Time) *Solution {
	fixed := m.lp
	fixed.colLo = append([]float64(nil), m.colLo...)
	fixed.colUp = append([]float64(nil), m.colUp...)
	for j, isInt := range m.integer {
		if isInt {
			fixed.colLo[j], fixed.colUp[j] = start[j], start[j]
		}
	}
	if d := time.Now().Add(time.Until(deadline) / 5); d.Before(deadline) {
		deadline = d
	}
	res := runHiGHS(ctx, &fixed, nil, opts, deadline)
	if res.err != nil || res.values == nil {
		return nil
	}
	s := m.decode(res.values)
	if Validate(m.q.p, s) != nil {
		return nil
	}
	return s
}

// lpRound solves the LP relaxation, floors its placement (which keeps every pool
// feasible), tops the placement up for a few target throughputs just below the LP's with
// the greedy placer, routes each candidate with routeLP and returns the best.
func (m *model) lpRound(ctx context.Context, opts Options, deadline time.Time) *Solution {
	q := m.q
	relaxed := m.lp
	relaxed.integer = make([]bool, len(m.integer))
	lpDeadline := deadline
	if d := time.Now().Add(time.Until(deadline) / 4); d.Before(deadline) {
		lpDeadline = d
	}
	res := runHiGHS(ctx, &relaxed, nil, opts, lpDeadline)
	if res.err != nil || res.values == nil {
		return nil
	}
	base := q.zeros()
	for i := range q.N {
		for n := range q.M {
			base[i][n] = int(math.Floor(res.values[m.x[i][n]] + 1e-6))
		}
	}
	T := res.values[m.T]
	var best *Solution
	for _, f := range []float64{1, 0.995, 0.99, 0.98, 0.96, 0.92} {
		if ctx.Err() != nil || time.Now().After(deadline) {
			break
		}
		x, d, ok := q.placeFrom(T*f, base)
		if !ok {
			continue
		}
		s := q.assemble(x, d, nil, math.Inf(1))
		if r := m.routeLP(ctx, m.startVector(s), opts, deadline); r != nil && r.Objective > s.Objective {
			s = r
		}
		if best == nil || s.Objective > best.Objective {
			best = s
		}
	}
	return best
}

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

// runHiGHS solves m on a locked OS thread in its own goroutine. A watchdog raises the
// interrupt flag at the deadline (HiGHS overshoots its own time_limit) or when ctx ends;
// if HiGHS still has not returned after a grace period, runHiGHS returns without it and
// the goroutine frees the HiGHS instance when the C call finally comes back.
func runHiGHS(ctx context.Context, m *lp, start []float64, opts Options, deadline time.Time) highsResult {
	flag := (*C.int)(C.calloc(1, C.size_t(unsafe.Sizeof(C.int(0)))))
	done := make(chan highsResult, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		done <- solveHiGHS(m, start, opts, deadline, flag)
	}()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	var interrupted bool
	select {
	case r := <-done:
		C.free(unsafe.Pointer(flag))
		return r
	case <-timer.C:
	case <-ctx.Done():
	}
	C.trident_set_flag(flag)
	interrupted = true
	grace := time.NewTimer(250*time.Millisecond + opts.TimeLimit/10)
	defer grace.Stop()
	select {
	case r := <-done:
		C.free(unsafe.Pointer(flag))
		r.interrupted = interrupted
		return r
	case <-grace.C:
		go func() { <-done; C.free(unsafe.Pointer(flag)) }()
		return highsResult{err: errors.New("highs did not stop after the interrupt"), interrupted: true}
	}
}

// solveHiGHS runs one HiGHS instance to completion; it must run on a locked OS thread.
func solveHiGHS(m *lp, start []float64, opts Options, deadline time.Time, flag *C.int) highsResult {
	h := C.Highs_create()
	if h == nil {
		return highsResult{err: errors.New("highs: create failed")}
	}
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
	setD("time_limit", math.Max(0.01, time.Until(deadline).Seconds()))
	if st := C.trident_install_interrupt(h, flag); st < 0 {
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
	res.interrupted = res.status == hsInterrupt
	if getI("primal_solution_status") == 2 { // kHighsSolutionStatusFeasible
		vals := dbl(nc)
		C.Highs_getSolution(h, &vals[0], nil, nil, nil)
		res.values = make([]float64, nc)
		for j := range nc {
			res.values[j] = float64(vals[j])
		}
		C.free(unsafe.Pointer(&vals[0]))
	}
	return res
}
