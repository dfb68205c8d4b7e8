package milp

import (
	"math"
	"sort"
)

// placer is the greedy's view of the cluster while it places instances: the instances
// x[i][n], what is left of every node, and which accelerator class each instance uses.
type placer struct {
	q    *prep
	x    [][]int
	room []nodeRoom
	// use[i*q.nClass+q.devOff[n]+k] counts instances of i on n using devices of class k;
	// stray[i*M+n] those that found no accepting class with room (only while a current
	// deployment over-commits a node: they make it over and are shed first).
	use   []int
	stray []int
	dev   []int // backing array of every room's dev
}

// nodeRoom is what is left of one node: cores, MiB and free devices per class.
type nodeRoom struct {
	cpu, mem float64
	dev      []int
	stray    int
}

// newPlacer returns the empty cluster with a fresh x; the other state is reused from the
// previous placement (the greedy places dozens of times per solve).
func (q *prep) newPlacer() *placer {
	N, M := q.N, q.M
	pl := q.pl
	if pl == nil {
		pl = &placer{q: q, room: make([]nodeRoom, M), use: make([]int, N*q.nClass), stray: make([]int, N*M),
			dev: make([]int, q.nClass)}
		q.pl = pl
	} else {
		clear(pl.use)
		clear(pl.stray)
	}
	pl.x = make([][]int, N)
	xs := make([]int, N*M)
	for i := range N {
		pl.x[i] = xs[i*M : (i+1)*M : (i+1)*M]
	}
	for n, nd := range q.p.Nodes {
		d := pl.dev[q.devOff[n] : q.devOff[n]+len(q.devs[n]) : q.devOff[n]+len(q.devs[n])]
		for k, c := range q.devs[n] {
			d[k] = c.Count
		}
		pl.room[n] = nodeRoom{cpu: nd.CPU, mem: nd.MemMB, dev: d}
	}
	return pl
}

// add places k instances of operator i on node n, each on the accepting class with room
// and the least memory (keeping large devices for the operators that need them).
func (pl *placer) add(i, n, k int) {
	if k <= 0 {
		return
	}
	o := &pl.q.p.Operators[i]
	r := &pl.room[n]
	r.cpu -= float64(k) * o.CPU
	r.mem -= float64(k) * o.MemMB
	pl.x[i][n] += k
	if o.GPUs == 0 {
		return
	}
	use := pl.use[i*pl.q.nClass+pl.q.devOff[n]:]
	for k > 0 {
		c := pl.class(i, n)
		if c < 0 {
			r.stray += k
			pl.stray[i*pl.q.M+n] += k
			return
		}
		t := min(k, r.dev[c]/o.GPUs)
		r.dev[c] -= t * o.GPUs
		use[c] += t
		k -= t
	}
}

// class returns the accepting class of node n with room for one instance of i and the
// least memory per device, or -1.
func (pl *placer) class(i, n int) int {
	o := &pl.q.p.Operators[i]
	best := -1
	for _, c := range pl.q.elig[i][n] {
		if pl.room[n].dev[c] >= o.GPUs && (best < 0 || pl.q.devs[n][c].MemMB < pl.q.devs[n][best].MemMB) {
			best = c
		}
	}
	return best
}

// remove takes k instances of operator i off node n: strays first, then those on the
// class with the most memory per device. Devices freed this way re-home strays.
func (pl *placer) remove(i, n, k int) {
	o := &pl.q.p.Operators[i]
	r := &pl.room[n]
	r.cpu += float64(k) * o.CPU
	r.mem += float64(k) * o.MemMB
	pl.x[i][n] -= k
	if o.GPUs == 0 {
		return
	}
	st := &pl.stray[i*pl.q.M+n]
	t := min(k, *st)
	*st -= t
	r.stray -= t
	k -= t
	use := pl.use[i*pl.q.nClass+pl.q.devOff[n]:]
	for k > 0 {
		best := -1
		for c := range pl.q.devs[n] {
			if use[c] > 0 && (best < 0 || pl.q.devs[n][c].MemMB > pl.q.devs[n][best].MemMB) {
				best = c
			}
		}
		t := min(k, use[best])
		r.dev[best] += t * o.GPUs
		use[best] -= t
		k -= t
	}
	if r.stray > 0 {
		pl.rehome(n)
	}
}

// rehome moves stray instances on node n onto classes that have room again.
func (pl *placer) rehome(n int) {
	q := pl.q
	r := &pl.room[n]
	for j := range q.N {
		st := &pl.stray[j*q.M+n]
		for *st > 0 {
			c := pl.class(j, n)
			if c < 0 {
				break
			}
			r.dev[c] -= q.p.Operators[j].GPUs
			pl.use[j*q.nClass+q.devOff[n]+c]++
			*st--
			r.stray--
		}
	}
}

// over reports whether node n is over-committed.
func (pl *placer) over(n int) bool {
	r := &pl.room[n]
	return r.cpu < -1e-9 || r.mem < -1e-9 || r.stray > 0
}

// culprit reports whether removing an instance of i helps the over-committed node n.
func (pl *placer) culprit(i, n int) bool {
	o := &pl.q.p.Operators[i]
	r := &pl.room[n]
	return (r.cpu < -1e-9 && o.CPU > 0) || (r.mem < -1e-9 && o.MemMB > 0) || (r.stray > 0 && o.GPUs > 0)
}

// fit returns how many more instances of i fit on node n.
func (pl *placer) fit(i, n int) int {
	r := &pl.room[n]
	return fit(&pl.q.p.Operators[i], r.cpu, r.mem, pl.q.devs[n], r.dev)
}

// accepted returns the number of devices in the cluster that o accepts (MaxInt32 for an
// operator without accelerators).
func accepted(o *Operator, devs [][]Device) int {
	if o.GPUs == 0 {
		return math.MaxInt32
	}
	t := 0
	for _, dd := range devs {
		for _, d := range dd {
			if accepts(o, d) {
				t += d.Count
			}
		}
	}
	return t
}

// pickiestFirst returns the operators ordered by the devices they accept (acc), fewest
// first; operators without accelerators last, in pipeline order.
func pickiestFirst(acc []int) []int {
	ops := make([]int, len(acc))
	for i := range ops {
		ops[i] = i
	}
	sort.SliceStable(ops, func(a, b int) bool { return acc[ops[a]] < acc[ops[b]] })
	return ops
}
