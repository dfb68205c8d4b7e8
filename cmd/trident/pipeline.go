package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/trident-sched/trident/planner/client"
)

// pipelineUsage is `trident pipeline -h`.
const pipelineUsage = `usage: trident pipeline <subcommand> [flags] [args]

Register, list, inspect and delete the pipelines a Trident planner schedules.

subcommands:
  register [-file job.nomad.hcl|job.json|-] <job>
             register (or re-register) a Nomad job as a pipeline. Without -file the
             planner reads the job already registered in Nomad under that ID. A .hcl or
             .nomad file is parsed by Nomad's API (-nomad-addr / NOMAD_ADDR); JSON is
             what 'nomad job run -output' prints.
  list       the registered pipelines with their latest decision
  status <job>
             one pipeline: its operators and the committed plan
  delete <job>
             stop planning the job (the Nomad job keeps running as it is)

flags of every subcommand:
  -address   planner HTTP address (default $TRIDENT_ADDR, else ` + client.DefaultAddress + `)
  -token     planner ACL token (default $TRIDENT_TOKEN)
  -json      print the planner's answer as JSON
`

// runPipeline dispatches `trident pipeline <subcommand>`.
func runPipeline(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, pipelineUsage)
		if len(args) == 0 {
			return errUsage
		}
		return flag.ErrHelp
	}
	subs := map[string]func(*pipelineCmd, context.Context, []string) error{
		"register": (*pipelineCmd).register,
		"list":     (*pipelineCmd).list,
		"status":   (*pipelineCmd).status,
		"delete":   (*pipelineCmd).delete,
	}
	sub, ok := subs[args[0]]
	if !ok {
		fmt.Fprint(stderr, pipelineUsage)
		return fmt.Errorf("unknown subcommand %q (want register, list, status or delete)", args[0])
	}
	c := &pipelineCmd{out: stdout}
	fs := flag.NewFlagSet("pipeline "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	def := client.DefaultConfig()
	fs.StringVar(&c.cfg.Address, "address", def.Address, "planner HTTP address ($"+client.EnvAddr+")")
	fs.StringVar(&c.cfg.Token, "token", def.Token, "planner ACL token ($"+client.EnvToken+")")
	fs.BoolVar(&c.json, "json", false, "print the planner's answer as JSON")
	if args[0] == "register" {
		fs.StringVar(&c.file, "file", "", "the job: a Nomad job file (.hcl/.nomad, parsed by Nomad), JSON, or - for JSON on stdin")
		fs.StringVar(&c.nomadAddr, "nomad-addr", "", "Nomad address to parse an HCL job file ($NOMAD_ADDR)")
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	want := 1
	if args[0] == "list" {
		want = 0
	}
	if fs.NArg() != want {
		if want == 0 {
			return fmt.Errorf("unexpected arguments %q: 'trident pipeline list' takes flags only", fs.Args())
		}
		return fmt.Errorf("want exactly one job ID after the flags, got %q (see 'trident pipeline -h')", fs.Args())
	}
	pc, err := client.New(c.cfg)
	if err != nil {
		return err
	}
	c.pc = pc
	ctx, cancel := context.WithTimeout(ctx, pipelineTimeout)
	defer cancel()
	return sub(c, ctx, fs.Args())
}

// pipelineCmd is one `trident pipeline` invocation.
type pipelineCmd struct {
	cfg       client.Config
	pc        *client.Client
	json      bool
	file      string
	nomadAddr string
	out       io.Writer
}

func (c *pipelineCmd) printJSON(v any) error {
	enc := json.NewEncoder(c.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func (c *pipelineCmd) register(ctx context.Context, args []string) error {
	job := args[0]
	raw, err := c.readJob(job)
	if err != nil {
		return err
	}
	resp, err := c.pc.RegisterPipeline(ctx, job, raw)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(resp)
	}
	fmt.Fprintf(c.out, "Pipeline %q registered at index %d with %d operators:\n", resp.Job, resp.Index, len(resp.Operators))
	return c.operatorTable(resp.Operators)
}

// readJob returns the job JSON of -file (nil without one). HCL goes through Nomad's parse
// API, which is what `nomad job run` does with it too.
func (c *pipelineCmd) readJob(job string) (json.RawMessage, error) {
	if c.file == "" {
		return nil, nil
	}
	var b []byte
	var err error
	if c.file == "-" {
		b, err = io.ReadAll(io.LimitReader(os.Stdin, 64<<20))
	} else {
		b, err = os.ReadFile(c.file)
	}
	if err != nil {
		return nil, fmt.Errorf("read -file: %w", err)
	}
	if t := strings.TrimSpace(string(b)); strings.HasPrefix(t, "{") {
		return json.RawMessage(b), nil
	}
	cfg := api.DefaultConfig()
	if c.nomadAddr != "" {
		cfg.Address = c.nomadAddr
	}
	nc, err := api.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("nomad client: %w", err)
	}
	j, err := nc.Jobs().ParseHCL(string(b), true)
	if err != nil {
		return nil, fmt.Errorf("parse %s with Nomad at %s: %w", c.file, cfg.Address, err)
	}
	if j.ID != nil && *j.ID != job {
		return nil, fmt.Errorf("%s defines job %q, not %q", c.file, *j.ID, job)
	}
	return json.Marshal(j)
}

func (c *pipelineCmd) list(ctx context.Context, _ []string) error {
	pipes, err := c.pc.Pipelines(ctx)
	if err != nil {
		return err
	}
	type row struct {
		client.Pipeline
		Plan *client.PlanResponse `json:"plan,omitempty"`
	}
	rows := make([]row, len(pipes))
	for i, p := range pipes {
		rows[i].Pipeline = p
		plan, err := c.pc.Plan(ctx, p.Job)
		switch {
		case err == nil:
			rows[i].Plan = &plan
		case !client.IsNotFound(err):
			return err
		}
	}
	if c.json {
		return c.printJSON(rows)
	}
	if len(rows) == 0 {
		fmt.Fprintln(c.out, "No pipelines registered")
		return nil
	}
	tw := tabwriter.NewWriter(c.out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "Job\tOperators\tWeight\tDecision\tStatus\tPlanned records/s\tPlan error")
	for _, r := range rows {
		dec, status, tput, perr := "-", "no decision yet", "-", ""
		if r.Plan != nil {
			dec, status, tput, perr = fmt.Sprint(r.Plan.DecisionIndex), r.Plan.Status, fmt.Sprintf("%.1f", r.Plan.Throughput), r.Plan.PlanError
		} else if q := r.Queued; q != nil {
			status = fmt.Sprintf("queued (#%d)", q.Position)
		}
		fmt.Fprintf(tw, "%s\t%d\t%g\t%s\t%s\t%s\t%s\n", r.Job, len(r.Operators), r.Weight, dec, status, tput, perr)
	}
	return tw.Flush()
}

func (c *pipelineCmd) status(ctx context.Context, args []string) error {
	p, err := c.pc.Pipeline(ctx, args[0])
	if err != nil {
		return err
	}
	plan, err := c.pc.Plan(ctx, args[0])
	var pp *client.PlanResponse
	switch {
	case err == nil:
		pp = &plan
	case !client.IsNotFound(err):
		return err
	}
	if c.json {
		return c.printJSON(struct {
			client.Pipeline
			Plan *client.PlanResponse `json:"plan,omitempty"`
		}{p, pp})
	}
	fmt.Fprintf(c.out, "Job            = %s\nRegistered     = index %d\nWeight         = %g\n", p.Job, p.RegisteredIndex, p.Weight)
	if p.MinThroughput > 0 {
		fmt.Fprintf(c.out, "Guaranteed     = %g records/s\n", p.MinThroughput)
	}
	if p.Batch {
		fmt.Fprintf(c.out, "Batch          = yes (input %g records)\n", p.InputRecords)
	}
	if q := p.Queued; q != nil {
		fmt.Fprintf(c.out, "Queued         = position %d since %s: %s\n", q.Position, time.UnixMilli(q.SinceUnixMilli).UTC().Format(time.RFC3339), q.Reason)
	}
	if pp == nil {
		fmt.Fprintf(c.out, "Decision       = none yet\n\n")
		return c.operatorTable(p.Operators)
	}
	fmt.Fprintf(c.out, "Decision       = #%d (%s, %s)\nPlanned        = %.2f records/s\nReason         = %s\n",
		pp.DecisionIndex, pp.Source, pp.Status, pp.Throughput, pp.Reason)
	if len(pp.Egress) > 0 {
		fmt.Fprintf(c.out, "Egress         = %s\n", egressCell(pp.Egress))
	}
	if sh := pp.Share; sh != nil {
		fmt.Fprintf(c.out, "Joint share    = %s\n", shareCell(*sh))
	}
	if pp.FailedDecisionIndex != 0 {
		fmt.Fprintf(c.out, "Failed         = decision #%d failed; Nomad reverted to the plan shown\n", pp.FailedDecisionIndex)
	}
	if pp.PlanError != "" {
		fmt.Fprintf(c.out, "Plan error     = %s\n", pp.PlanError)
	}
	if pp.Detail != "" && (pp.Status == "failed" || len(pp.Canaries) > 0) {
		fmt.Fprintf(c.out, "Detail         = %s\n", pp.Detail)
	}
	if err := c.planTable(p.Operators, pp.Groups); err != nil {
		return err
	}
	if err := c.trialTable(p.Operators, pp.Groups); err != nil {
		return err
	}
	return c.canaryTable(pp.Canaries)
}

// trialTable prints the running tuning trials of every operator, slot by slot, with
// whether the planner saw one fail to run (nothing when no trial runs).
func (c *pipelineCmd) trialTable(ops []client.Operator, groups map[string]client.PlanGroup) error {
	var rows []string
	for _, o := range ops {
		for _, tr := range groups[o.Name].Trials {
			status := "running"
			if tr.Failed != "" {
				status = "failed: " + tr.Failed
			}
			rows = append(rows, fmt.Sprintf("%s\t%d\t%s\t%d\t%s\n", o.Name, tr.Slot, tr.Config, tr.Epoch, status))
		}
	}
	if len(rows) == 0 {
		return nil
	}
	fmt.Fprintln(c.out, "\nTrials")
	tw := tabwriter.NewWriter(c.out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "Operator\tSlot\tConfig\tEpoch\tStatus")
	for _, r := range rows {
		fmt.Fprint(tw, r)
	}
	return tw.Flush()
}

// planTable prints each operator's planned count, config, candidate config, tuning trial
// (slot 0's, and how many more slots run one) and placement.
func (c *pipelineCmd) planTable(ops []client.Operator, groups map[string]client.PlanGroup) error {
	fmt.Fprintln(c.out, "\nOperators")
	tw := tabwriter.NewWriter(c.out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "Name\tCount\tConfig\tCandidate\tTrial\tPlacement")
	for _, o := range ops {
		g := groups[o.Name]
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", o.Name, g.Count, orDash(g.Config), orDash(g.CandidateConfig), trialCell(g), placement(g))
	}
	return tw.Flush()
}

// trialCell is the Trial column of g: slot 0's config ("-" none) and the count of trials
// in other slots.
func trialCell(g client.PlanGroup) string {
	if more := len(g.Trials) - 1; more > 0 && g.TrialConfig != "" {
		return fmt.Sprintf("%s (+%d slots)", g.TrialConfig, more)
	}
	return orDash(g.TrialConfig)
}

// canaryTable prints the newest decision's canaries, if any.
func (c *pipelineCmd) canaryTable(cs map[string]client.Canary) error {
	if len(cs) == 0 {
		return nil
	}
	ops := make([]string, 0, len(cs))
	for op := range cs {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	fmt.Fprintln(c.out, "\nCanaries")
	tw := tabwriter.NewWriter(c.out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "Operator\tConfig\tNode\tDeployment\tVerdict\tBy\tCapacity (running -> canary)\tDetail")
	for _, op := range ops {
		k := cs[op]
		verdict := k.Verdict
		if verdict == "" {
			verdict = "measuring"
		}
		capa := fmt.Sprintf("%.3g -> %s", k.CurrentCapacity, "?")
		if k.CandidateCapacity > 0 {
			capa = fmt.Sprintf("%.3g -> %.3g", k.CurrentCapacity, k.CandidateCapacity)
		}
		dep := k.Deployment
		if len(dep) > 8 {
			dep = dep[:8]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", op, k.Config, orDash(k.Node), dep, verdict, orDash(k.By), capa, orDash(k.Detail))
	}
	return tw.Flush()
}

// placement renders node=current[+candidate] pairs, sorted by node.
func placement(g client.PlanGroup) string {
	nodes := make([]string, 0, len(g.Nodes))
	for n := range g.Nodes {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	parts := make([]string, 0, len(nodes))
	for _, n := range nodes {
		pl := g.Nodes[n]
		s := fmt.Sprintf("%s=%d", n, pl.Current)
		if pl.Candidate > 0 {
			s += fmt.Sprintf("+%d", pl.Candidate)
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (c *pipelineCmd) operatorTable(ops []client.Operator) error {
	tw := tabwriter.NewWriter(c.out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "Order\tOperator\tCPU\tMemory MB\tGPUs\tTunable\tConfig")
	for _, o := range ops {
		tun := "no"
		if o.Params != "" {
			tun = "yes"
		}
		fmt.Fprintf(tw, "%d\t%s\t%g\t%d\t%d\t%s\t%s\n", o.Order, o.Name, o.CPU, o.MemoryMB, o.GPUs, tun, orDash(o.Config))
	}
	return tw.Flush()
}

func (c *pipelineCmd) delete(ctx context.Context, args []string) error {
	resp, err := c.pc.DeletePipeline(ctx, args[0])
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(resp)
	}
	fmt.Fprintf(c.out, "Pipeline %q deleted at index %d; its Nomad job keeps running as it is\n", args[0], resp.Index)
	return nil
}

// pipelineTimeout bounds one CLI invocation when the caller gave no deadline.
const pipelineTimeout = 60 * time.Second

// maxEgressNodes is how many nodes the Egress line names, the busiest first.
const maxEgressNodes = 4

// egressCell summarises a plan's egress: the busiest nodes' traffic out, in MB/s, and
// how many more nodes send some.
func egressCell(eg map[string]float64) string {
	nodes := make([]string, 0, len(eg))
	for n := range eg {
		nodes = append(nodes, n)
	}
	sort.Slice(nodes, func(i, j int) bool {
		if eg[nodes[i]] != eg[nodes[j]] {
			return eg[nodes[i]] > eg[nodes[j]]
		}
		return nodes[i] < nodes[j]
	})
	parts := make([]string, 0, maxEgressNodes+1)
	for k, n := range nodes {
		if k == maxEgressNodes {
			parts = append(parts, fmt.Sprintf("and %d more nodes", len(nodes)-k))
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.3g MB/s", n, eg[n]/1e6))
	}
	return strings.Join(parts, ", ")
}

// shareCell renders a joint share: its throughput, its accelerators per class and its
// part of every link, e.g. "45.95 records/s, A10G ×13 + L4 ×24, 7.9 % of every link".
func shareCell(sh client.Share) string {
	out := fmt.Sprintf("%.2f records/s", sh.Throughput)
	var devs []string
	for _, d := range sh.Devices {
		name := d.Model
		if name == "" {
			name = "GPU"
		}
		devs = append(devs, fmt.Sprintf("%s ×%d", name, d.Count))
	}
	if len(devs) > 0 {
		out += ", " + strings.Join(devs, " + ")
	}
	if sh.Link > 0 {
		out += fmt.Sprintf(", %.1f %% of every link until planned", 100*sh.Link)
	}
	return out
}
