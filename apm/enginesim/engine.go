package enginesim

import (
	"math"
	"math/rand/v2"
)

// engineParams are the physical constants of one engine configuration.
type engineParams struct {
	// maxSeqs is the admission limit (vLLM max_num_seqs): the most requests in the batch.
	maxSeqs int
	// kvTokens is the KV-cache capacity in tokens.
	kvTokens float64
	// One decode step costs stepBase (weights streamed once) + stepPerSeq per running
	// sequence + stepPerCtx per cached context token (attention reads), plus
	// prefillPerTok per prompt token admitted in the step (chunked prefill).
	stepBase, stepPerSeq, stepPerCtx, prefillPerTok float64
}

// workload is one request population: log-normal prompts and log-logistic (heavy-tailed)
// outputs, clipped to the engine's limits.
type workload struct {
	inMedian, inSigma   float64
	outMedian, outShape float64
	// prefillScale multiplies the prompt processing cost: content the token counts do not
	// show (image tiles behind a short prompt, cache-unfriendly prompts).
	prefillScale float64
}

// maxPrompt and maxOut clip the request lengths (the server's context limits).
const (
	maxPrompt = 8192
	maxOut    = 2048
)

func (w workload) draw(rng *rand.Rand) (prompt, out int) {
	p := w.inMedian * math.Exp(w.inSigma*rng.NormFloat64())
	u := rng.Float64()
	for u == 0 {
		u = rng.Float64()
	}
	o := w.outMedian * math.Pow(u/(1-u), 1/w.outShape)
	prompt = int(math.Min(math.Max(math.Round(p), 8), maxPrompt))
	out = int(math.Min(math.Max(math.Round(o), 1), maxOut))
	return prompt, out
}

// request is one request inside the engine.
type request struct {
	// prompt is the context to (re)compute on admission: the original prompt plus, after a
	// preemption, the tokens generated before it.
	prompt int
	// left is the number of output tokens still to generate.
	left int
	// origPrompt and origOut are the request's lengths as the client sees them.
	origPrompt, origOut int
	// pop is the request population the request was drawn from (engine.pop then).
	pop int
	// admitted is the time of first admission (-1 before it).
	admitted float64
	// held is the KV-cache tokens the request holds while running.
	held float64
}

// engine is an LLM serving engine with continuous batching (one token per running
// sequence per step), a KV-cache limit with recompute preemption of the newest sequence,
// FIFO admission, an input bound on the requests it holds (a client semaphore or a bounded
// queue), an upstream producer that blocks on the bound and a bounded output buffer drained
// by a downstream consumer.
type engine struct {
	rng *rand.Rand
	p   engineParams
	w   workload
	// pop is the index of w among the trace's request populations (ground truth only).
	pop int
	// bound caps the requests held: waiting, plus running when countRunning.
	bound        int
	countRunning bool

	t       float64
	running []*request // admission order
	waiting []*request // FIFO; preempted requests return to the front
	kvUsed  float64

	// The producer emits records at times nextArrival; pagesLeft records of the current
	// document follow without a gap. infinite: every free place is filled at once.
	nextArrival float64
	pagesLeft   int
	blocked     bool
	infinite    bool
	// rate is the producer's record rate and docPages the mean records per document
	// (1: single records, Poisson).
	rate, docPages float64

	// The output buffer holds outCap records, drained one per 1/consumeRate (0: at once).
	outBuf, outCap int
	consumeRate    float64
	nextConsume    float64

	// Warm-up after a (re)start: step costs are multiplied by 1 + warmSlow, decaying
	// linearly to 1 over warmLen seconds from warmStart.
	warmStart, warmLen, warmSlow float64
	// started is the time of the last (re)start (0: the trace's start).
	started float64

	// Feature window: lengths of the last featureWindow arrived requests.
	featIn, featOut []float64
	featNext        int

	acc, carry accum
}

// featureWindow is the number of most recently arrived requests the exported workload
// features average over (the contract's "mean over the last window").
const featureWindow = 256

// accum collects one interval's counters.
type accum struct {
	completions int
	// byPop counts the completions by request population (nil: none yet).
	byPop        map[int]int
	useful       float64 // per-request service times of completions, summed
	busy, blockd float64 // seconds
	// starved is the idle batch-slot time: seconds weighted by the fraction of slots free
	// with nothing waiting.
	starved float64
	warm    float64 // seconds in warm-up
}

func (e *engine) held() int {
	if e.countRunning {
		return len(e.waiting) + len(e.running)
	}
	return len(e.waiting)
}

// queueGauge is the input queue length the operator exports (its convention).
func (e *engine) queueGauge() float64 { return float64(e.held()) }

// warmFactor returns the step cost multiplier at time t.
func (e *engine) warmFactor(t float64) float64 {
	if e.warmLen <= 0 || t >= e.warmStart+e.warmLen {
		return 1
	}
	return 1 + e.warmSlow*(1-(t-e.warmStart)/e.warmLen)
}

// gap returns the time to the producer's next record.
func (e *engine) gap() float64 {
	if e.pagesLeft > 0 {
		e.pagesLeft--
		return 0
	}
	if e.docPages > 1 {
		// Document sizes are heavy-tailed (log-logistic, shape 1.6) with the given mean.
		u := e.rng.Float64()
		for u == 0 {
			u = e.rng.Float64()
		}
		median := e.docPages / 1.9 // mean/median of log-logistic shape 1.6 ≈ 1.9
		k := int(math.Min(math.Max(math.Round(median*math.Pow(u/(1-u), 1/1.6)), 1), 40*e.docPages))
		e.pagesLeft = k - 1
		return e.rng.ExpFloat64() * e.docPages / e.rate
	}
	return e.rng.ExpFloat64() / e.rate
}

// setRate changes the producer's rate (records/s; 0: none), keeping its current document.
func (e *engine) setRate(rate float64) {
	old := e.rate
	e.rate = rate
	switch {
	case rate <= 0:
		e.nextArrival = math.Inf(1)
	case old <= 0 || math.IsInf(e.nextArrival, 1):
		e.nextArrival = e.t + e.gap()
	}
}

// deliver moves the producer's records that are due into the engine, within the bound.
func (e *engine) deliver() {
	if e.infinite {
		for e.held() < e.bound {
			e.enqueue()
		}
		return
	}
	for e.nextArrival <= e.t {
		if e.held() >= e.bound {
			e.blocked = true
			return
		}
		base := e.nextArrival
		if e.blocked {
			base, e.blocked = e.t, false
		}
		e.enqueue()
		e.nextArrival = base + e.gap()
	}
}

func (e *engine) enqueue() {
	p, o := e.w.draw(e.rng)
	e.record(p, o)
	e.waiting = append(e.waiting, &request{prompt: p, left: o, origPrompt: p, origOut: o, admitted: -1, pop: e.pop})
}

// record adds a request's lengths to the feature window.
func (e *engine) record(p, o int) {
	e.featIn, e.featOut = ring(e.featIn, e.featNext, float64(p)), ring(e.featOut, e.featNext, float64(o))
	e.featNext = (e.featNext + 1) % featureWindow
}

// consume lets the downstream consumer take what it has taken by time t.
func (e *engine) consume() {
	if e.consumeRate <= 0 {
		e.outBuf = 0
		return
	}
	for e.outBuf > 0 && e.nextConsume <= e.t {
		e.outBuf--
		e.nextConsume += 1 / e.consumeRate
	}
	if e.outBuf == 0 && e.nextConsume < e.t {
		e.nextConsume = e.t
	}
}

// admit moves waiting requests into the batch while a slot and KV room (1% watermark)
// remain, and returns the prompt tokens to prefill.
func (e *engine) admit() float64 {
	tok := 0.0
	for len(e.waiting) > 0 && len(e.running) < e.p.maxSeqs {
		r := e.waiting[0]
		need := float64(r.prompt)
		if e.kvUsed+need > 0.99*e.p.kvTokens && len(e.running) > 0 {
			break
		}
		e.waiting = e.waiting[1:]
		r.held = need
		e.kvUsed += need
		if r.admitted < 0 {
			r.admitted = e.t
		}
		e.running = append(e.running, r)
		tok += need
	}
	return tok
}

func ring(buf []float64, i int, v float64) []float64 {
	if len(buf) < featureWindow {
		return append(buf, v)
	}
	buf[i] = v
	return buf
}

// features returns the window means of prompt and output lengths.
func (e *engine) features() []float64 {
	return []float64{mean(e.featIn), mean(e.featOut)}
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// spend books the time span [e.t, e.t+dt) to the interval ending at until and to the
// carry beyond it.
func (e *engine) spend(dt, until float64, busy bool, starved float64, blocked bool) {
	in := math.Max(0, math.Min(dt, until-e.t))
	out := dt - in
	book := func(a *accum, d float64) {
		if d <= 0 {
			return
		}
		if busy {
			a.busy += d
		}
		a.starved += starved * d
		if blocked {
			a.blockd += d
		}
		if e.warmLen > 0 && e.t < e.warmStart+e.warmLen {
			a.warm += d
		}
	}
	book(&e.acc, in)
	book(&e.carry, out)
}

// run advances the engine to time until (the last step may overrun; its time beyond until
// goes to the carry of the next interval).
func (e *engine) run(until float64) {
	for e.t < until {
		e.consume()
		e.deliver()
		if e.consumeRate > 0 && e.outBuf >= e.outCap {
			// Output blocked: the engine waits for the consumer.
			next := math.Max(e.nextConsume, e.t+1e-6)
			dt := math.Min(next, until) - e.t
			e.spend(dt, until, len(e.running) > 0, 0, true)
			e.t += dt
			continue
		}
		prefill := e.admit()
		// Starved: the fraction of the batch slots the engine could run but has no request
		// for (nothing waiting; the bound, when it counts running requests, caps the slots).
		starved := 0.0
		if len(e.waiting) == 0 {
			slots := e.p.maxSeqs
			if e.countRunning && !e.infinite {
				slots = min(slots, e.bound)
			}
			starved = math.Max(0, float64(slots-len(e.running))/float64(slots))
		}
		if len(e.running) == 0 {
			// Idle until the next record arrives.
			next := math.Min(e.nextArrival, until)
			if next <= e.t {
				next = e.t + 1e-6
			}
			e.spend(next-e.t, until, false, starved, false)
			e.t = next
			continue
		}
		n := float64(len(e.running))
		dt := (e.p.stepBase + e.p.stepPerSeq*n + e.p.stepPerCtx*e.kvUsed + e.p.prefillPerTok*e.w.prefillScale*prefill) * e.warmFactor(e.t)
		e.spend(dt, until, true, starved, false)
		end := e.t + dt
		a := &e.acc
		if end > until {
			a = &e.carry
		}
		kept := e.running[:0]
		for _, r := range e.running {
			r.left--
			r.held++
			e.kvUsed++
			if r.left <= 0 {
				e.kvUsed -= r.held
				a.completions++
				if a.byPop == nil {
					a.byPop = map[int]int{}
				}
				a.byPop[r.pop]++
				a.useful += end - r.admitted
				if e.consumeRate > 0 {
					e.outBuf++
				}
				continue
			}
			kept = append(kept, r)
		}
		e.running = kept
		// Recompute preemption of the newest sequences while the cache overflows.
		for e.kvUsed > e.p.kvTokens && len(e.running) > 1 {
			v := e.running[len(e.running)-1]
			e.running = e.running[:len(e.running)-1]
			e.kvUsed -= v.held
			v.prompt = int(v.held)
			v.held = 0
			e.waiting = append([]*request{v}, e.waiting...)
		}
		e.t = end
	}
}

// interval closes the interval ending at until and returns its counters.
func (e *engine) interval(until float64) accum {
	e.run(until)
	a := e.acc
	e.acc, e.carry = e.carry, accum{}
	return a
}

// restart models an engine restart at time e.t: requests in the engine are lost and
// re-sent by the client (they return to the queue with their original lengths), the KV
// cache is empty and the engine warms up again.
func (e *engine) restart(p engineParams, warmLen, warmSlow float64) {
	var back []*request
	for _, r := range e.running {
		back = append(back, &request{prompt: r.origPrompt, left: r.origOut, origPrompt: r.origPrompt, origOut: r.origOut, admitted: -1, pop: r.pop})
	}
	for _, r := range e.waiting {
		back = append(back, &request{prompt: r.origPrompt, left: r.origOut, origPrompt: r.origPrompt, origOut: r.origOut, admitted: -1, pop: r.pop})
	}
	e.running, e.waiting, e.kvUsed = nil, back, 0
	e.started = e.t
	e.p = p
	e.warmStart, e.warmLen, e.warmSlow = e.t, warmLen, warmSlow
}

// profile returns the sustained rate of an engine with parameters p serving workload w at
// full load behind the same bound (an infinite supply, no downstream limit, no warm-up):
// the ground-truth capacity, as profiling the operator in isolation would measure it.
func profile(p engineParams, w workload, bound int, countRunning bool, seed uint64) float64 {
	const burnIn, measure = 300.0, 2400.0
	e := &engine{rng: rand.New(rand.NewPCG(seed, 0x70726f66)), p: p, w: w, bound: bound, countRunning: countRunning, infinite: true}
	e.interval(burnIn)
	n := 0
	for t := burnIn + 60; t <= burnIn+measure; t += 60 {
		n += e.interval(t).completions
	}
	return float64(n) / measure
}
