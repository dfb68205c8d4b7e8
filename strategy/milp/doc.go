// Package milp is Trident's scheduling layer: the joint parallelism / placement /
// rolling-configuration-transition MILP of the Trident paper, Sec. 6 (Eqs. 10-26), with a
// HiGHS (cgo) solver, a greedy fallback, an independent solution checker and MPS export.
// It knows nothing about Nomad: callers translate jobs and nodes into a Problem.
//
// # Model
//
// Indices: operator i = 0..N-1 in pipeline order, node n = 0..M-1. Constants: unit rate
// mu_i (Operator.Capacity), candidate rate mu^c_i, cold start tau_i, window W, amplification
// A_i, output record size s_i, per-instance CPU/memory/accelerators c_i, m_i, g_i, node
// pools C_n, M_n, device classes k of node n with G_nk devices (Node.Devices; a node with
// GPUs alone is one class), egress B_n, current instances cur_in of which K_in already run the
// candidate configuration, old instances R_i = sum_n (cur_in - K_in), batch cap delta_max.
//
// Columns (model.go):
//
//	T        throughput, original input records/s              (paper T)
//	B        peak node egress, in units of bref bytes/s        (paper B)
//	x_in     integer instances of i on n                       (paper x_in)
//	P_i      integer parallelism of i                          (paper P_i)
//	d_in     integer instances of i on n switching to the candidate this round; the
//	         paper's delta_i = sum_n d_in. Only created when mu~_i > mu_i (Eq. 11): with
//	         mu~_i <= mu_i a transition can only lower capacity and costs a restart, so it
//	         is never part of an optimum and the column is left out.
//	w_in     share of T processed by i on n (continuous; the rate is A_i * w_in)
//	o_in     export of boundary i -> i+1 from node n, in shares of T (continuous; only
//	         at nodes with egress)
//	e_n      egress of n in units of its own bound B_n (of bref when unlimited;
//	         continuous; only at nodes with egress)
//	u_in     launches Delta+_in, only where cur_in > 0 (elsewhere Delta+ = x_in)
//	y_ink    integer instances of i on n using device class k, only where i accepts
//	         several classes of n (elsewhere the one accepted class takes x_in)
//
// Rows:
//
//	Eq. (10) objective: max T - alpha*B - beta*C, C as in Eq. (22) below. Delta-_in is
//	         substituted (Delta- = Delta+ - x + cur), so C = sum (L_i+Tm_i) u_in - Tm_i x_in
//	         + Tm_i cur_in where cur_in > 0, L_i x_in elsewhere, plus (L_i+Tm_i) d_in for the
//	         restart of a transitioning instance (an extension: the paper does not charge
//	         restarts, which would make worthless transitions free ties).
//	Eq. (11) mu~_i = mu^c_i * max(0, 1 - tau_i/W), precomputed.
//	Eq. (12)-(13) per node "cap_i_n": A_i w_in <= mu^c_i K_in + mu~_i d_in + mu_i (x_in - K_in - d_in);
//	         aggregate "tput_i": A_i T <= mu^c_i K_i + mu~_i delta_i + mu_i (P_i - K_i - delta_i)
//	         (implied by the per-node rows and flow_i; kept as a cut).
//	Eq. (14) "place_i": sum_n x_in = P_i.
//	Eq. (15)-(16) "cpu_n", "mem_n": sum_i c_i x_in <= C_n, etc.
//	Eq. (17) per device class, "gpu_n" (or "gpu_n_k" on nodes with several classes):
//	         sum over the operators i accepting class k of g_i y_ink <= G_nk, and
//	         "split_i_n": x_in = sum_k y_ink. An instance takes all its g_i devices from
//	         one class (as Nomad assigns one device request from one device group); i
//	         accepts k when the model is in Operator.GPUModels (or that is empty) and the
//	         device memory is at least Operator.GPUMemMB. x_in is bounded by what fits.
//	Eq. (18)-(19) "flow_i": sum_n w_in = T: every operator processes the whole (amplified)
//	         stream; what operator i emits on n is consumed by i+1 on n (local) or
//	         exported: "out_i_n": o_in >= w_in - w_(i+1)n.
//	Eq. (20) "egress_n": sum_i A_(i+1) s_i o_in / B_n <= e_n <= 1 (e_n unbounded, in
//	         bref units, where B_n is unlimited) and "peak_n": e_n B_n / bref <= B. A node
//	         with B_n = 0 has neither: "local_i_n": w_in <= w_(i+1)n. This per-node export
//	         form replaces the paper's f_inm (N*M instead of N*M^2 columns) and has the
//	         same optimum: with only egress bounded per node, keeping min(out, in) local
//	         and shipping the rest is an optimal routing of any transportation plan.
//	         Measuring each node's egress in its own bound keeps the solver's feasibility
//	         tolerance relative to that bound.
//	Eq. (21) "mig_i_n": u_in >= x_in - cur_in (u_in >= 0), Delta-_in substituted as above.
//	Eq. (22) C enters the objective directly (no column).
//	Eq. (23) no rollback: bound x_in >= K_in. This is the paper's P_i >= K_i strengthened
//	         per node: already-transitioned instances stay where they run (a replacement
//	         elsewhere would pay a cold start, so counting it at mu^c would be wrong).
//	Eq. (24)-(25) "batch_i": sum_n d_in <= min(R_i, delta_max).
//	Eq. (26) "stay_i_n": d_in <= x_in - K_in (so P_i - K_i - delta_i >= 0).
//	Contention (an option, CAPSys-style; off unless some Operator.Contention is declared):
//	         per node n and declared resource kind k, "cont_n_k":
//	         sum_i (Weight_ik / mu_i) A_i w_in <= 1 - Pressure_nk. Weight_ik is the share of
//	         the node's resource k one full-rate instance of i uses, so co-located
//	         network- or IO-heavy operators share one node's resource instead of each
//	         counting on all of it. Only w (continuous) enters: no new column, and the
//	         aggregate bound adds the pooled form T sum_i (Weight_ik/mu_i) A_i <=
//	         sum_n (1 - Pressure_nk); decoding scales an over-used node's contending rates
//	         down (repairContention) and Validate checks the rows.
//	Single pending transition: structural, an Operator has at most one Candidate, and
//	         Check refuses candidate-config instances without one.
//
// Assumptions stated: the first operator reads its input from storage without pipeline
// egress, the last operator's output is not pipeline traffic (s of the last operator is
// ignored), and an instance reserves the same resources on either configuration.
//
// # Speed-ups (all exact)
//
//   - Aggregate bound: T <= Tub, the largest T for which every operator's minimum integer
//     parallelism (Eq. 13 with the best rolling batch) fits the cluster's pooled CPU and
//     memory and, per set S of device classes some operator accepts, the operators
//     accepting only classes in S fit S's devices (a Hall condition), and the same pools
//     rounded node by node in units of the operators' requirements (packRows:
//     sum_i floor(a_i/s) P_i <= sum_n floor(C_n/s)): a relaxation of the per-node
//     constraints, hence valid. It bounds the column T and proves the greedy
//     plan on uniform clusters. The same aggregates as rows on the parallelisms P_i
//     ("agg_*", redundant for the LP) were removed: on heterogeneous clusters they misled
//     HiGHS's search (het/128/s1: 107 with them, 396 without, bound 452).
//   - Link rows (linkRows; Options.NoLinkRows leaves them out): on a node with bounded
//     egress, what operator i processes there either goes on to i+1 on the node or
//     leaves it, and the node's egress carries at most B_n / min F_l of such drops over
//     the boundaries l >= i (F_l bytes per unit of T); so operators i+1, i+2, ... must
//     process nearly as much on the node, with whole instances, in its pools. The
//     largest w_in that passes (chainCap, by bisection), where it is below what the
//     pools allow, bounds the column w_in, and where it is also below one instance's
//     rate, "link_i_n": w_in <= U_in x_in (x_in >= 1 whenever w_in > 0; the convex hull
//     of the two). Without them the LP relaxation keeps every boundary local with a
//     sliver of an instance of every operator on every node: on small bandwidth-bound
//     instances it sat 3-19 % above the optimum, with them at it (het/10/s3: 242.3 ->
//     203.63, optimum 203.63; test); on bench milp -hetero they lower 6 of 50 LP bounds
//     (het/128/s10 413.8 -> 354.1, het/32/s10 629.4 -> 589.7, the optimum).
//   - Slot rows (slotRows; Options.NoSlotRows leaves them out): per node with
//     accelerators, the device row lifted by what an instance's cores and memory leave
//     unusable, "slot_n": sum_i a_i x_in <= V_n with a_i = g_i + V0 - R_i (V0 the most
//     devices whole instances can use on n, R_i the most with an instance of i among
//     them) and V_n the exact maximum of the left-hand side over the integer vectors that
//     fit the node (enumeration): valid for any a_i. On a 2-GPU, 128 GiB node beside a
//     1-GPU, 128 GiB operator this is 2 x_big + x_mid + x_small <= 2, which the LP
//     relaxation's 0.39/0.83/0.78 instances violate: het/128/s10's LP falls from 354.15
//     to 348.67 (HiGHS's root cuts reach 348.4), and no other LP of bench milp -hetero
//     moves. The LP that guides rounding and RENS is solved without them (with them
//     both started from worse points on het/128/s10), and only the rows its optimum
//     violates stay in the model HiGHS and the sub-MIPs solve (keepCutSlotRows).
//   - Phased search (search.go), every phase on the clock of Options.TimeLimit and the
//     whole solve stopping as soon as the best plan is proven within RelGap of the best
//     bound: (1) the greedy plan (bisection on T, minimum parallelism, migration-aware
//     spread placement from the current deployment) against Tub; (2) the same placement
//     re-routed by the model's LP with every integer column fixed (matters when egress
//     binds), then topped up (fill: every node's spare room filled, one instance at a
//     time, with the operator of lowest capacity there, so that each node becomes as
//     complete a local pipeline as it can), routed by the same LP and pruned of the
//     launches its routing leaves unused; on bandwidth-bound clusters this is what keeps
//     traffic local (het/128/s9: 442.7 -> 552.7, bound 575.2); (3) the LP relaxation, whose optimum is a proven bound; (4) LP rounding:
//     the LP placement floored (keeps every pool feasible), topped up by the greedy placer
//     for targets just below the LP throughput, then routed by the same LP, and the best
//     of these filled as in (2); (5) RENS:
//     HiGHS on the model with x_in and d_in restricted to the floor or ceiling of an
//     interior optimal LP point (interior point method without crossover; a simplex
//     vertex would pin most x_in at 0; a simplex LP cut short by its share leaves the
//     interior point as the only guide), at most 40 % of the remaining time, its plan
//     filled as in (2); (6) the move search (move.go), at most 50 % of the remaining
//     time: the routing LP of the best plan, solved as an LP, values one more instance of
//     operator i on node n by the dual of its capacity row cap_i_n times one instance's
//     rate; instances are added at the most valuable pairs, room made by removing
//     instances the routing leaves (partly) unused, and an operator at its parallelism
//     limit gives up its least-used instance elsewhere; a batch of moves is kept when the
//     routing LP of the new placement pays (a plan capped by MaxInstances is improved only
//     this way: het/64/s1 21 % below the bound -> proven within the gap); the moves go on
//     until a tenth of the gap, and a move plan that ends inside the gap but not there is
//     handed to HiGHS for a tenth of the gap and at most 20 % of the remaining time (a
//     plan just inside the gap leaves up to the gap to a peer that overshoots it);
//     (7) on clusters of 64 nodes or more, the node-neighbourhood search (lns.go), at
//     most 70 % of the remaining time: HiGHS re-solves the placement on 4-16 nodes at a
//     time (the most valuable by the routing LP's duals plus random ones, or every other
//     time the nodes one valuable operator can use), with every integer column of the
//     other nodes fixed at the best plan's and all the routing free, from the best plan;
//     a sub-MIP moves whole local chains together, which no single move pays for
//     (het/64/s5: the moves stall at 19.74, the neighbourhoods reach 23.4-23.7 in 10 s
//     and 25.51 in 60 s, bound 25.90); grow rounds (grow.go), first and after every
//     sub-MIP that paid, clear a node for one more instance of the bottleneck
//     accelerator operator, re-home what they evict, and let HiGHS re-place 8 nodes from
//     there (het/128/s1: 2.9 % -> proven at 10 s); it stops after 12 sub-MIPs in a row
//     without gain, and its plan is polished like a move plan; (8) HiGHS on the full
//     model from the best plan for the rest. Uniform clusters end at (1): the greedy
//     plan is within the gap of Tub. Options.AlwaysMIP runs every phase.
//   - Symmetry breaking (Options.SymmetryRows, off by default): nodes with equal pools,
//     devices, bandwidth, current and pinned instances form classes; "sym_c_k" orders
//     each class by resource load (sum_i key_i x_in >= sum_i key_i x_i(n+1)), valid
//     because any solution can be permuted inside a class; starts are permuted to satisfy
//     it. HiGHS's own symmetry detection handles identical nodes better: with the rows,
//     HiGHS was slower or no faster on every configuration of the paper's uniform and
//     bandwidth-bound clusters (large classes; video/32/hetero-net median 2.6 s instead of
//     0.29 s), and neutral on heterogeneous clusters (small classes).
//   - Scaling: each node's egress is modelled in units of its own bound, the peak B in
//     units of the largest finite bound, and the default alpha keeps the network
//     tie-breaker at 1e-4 of the throughput scale, far above the solver's tolerances
//     (unscaled, HiGHS silently ignores it). The default beta makes a whole redeploy cost
//     1 % of it: at 1e-4 the per-instance migration costs fell near 1e-8, and on 8-node
//     rounds with a pending candidate HiGHS's root heuristics chased plans that differ by
//     such costs until the time limit (4.6 times the solve time, fewer plans within the
//     gap, more launches).
//
// # Exactness and the reported gap
//
// Nothing of the model is relaxed: the speed-ups are valid inequalities, starts and
// shortcuts. Solution.Gap is (Bound - Objective)/Bound with Objective = T - alpha*B -
// beta*C and Bound = min(Tub, LP relaxation optimum, HiGHS dual bound of the full model;
// the bounds of RENS and of the neighbourhood sub-MIPs cover only their neighbourhoods and
// are discarded). The relative throughput loss can exceed it by the migration term: a
// plan may give up at most 1 % of the throughput scale (the default beta) rather than
// redeploy everything. Status optimal is a property of the
// returned plan (its own Gap within RelGap), never inherited from HiGHS's status. Decoding
// a solver incumbent repairs the routing instead of scaling it (assemble): it gives up only
// the solver's residues (about 1e-9 of T), also at nodes without egress, where any export
// left by a residue would otherwise forbid all traffic. Every plan, from HiGHS, RENS or the
// greedy, passes Validate before it is kept. Solution.Source says which phase produced it.
package milp
