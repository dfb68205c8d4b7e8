package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/trident-sched/trident/sim/worker"
)

const datasetUsage = `usage: trident dataset gen|verify [flags]

  gen     publish an input dataset with workload regime shifts to the pipeline's first stage
          (pdf: academic papers, annual reports, financial reports in sequence; video:
          short-form then long-form clips) and record its spec for the verifier
  verify  check that the pipeline sink holds every record the dataset must yield, exactly once
          (exit status 1 when not)
`

// runDataset generates or verifies an example pipeline dataset.
func runDataset(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(stderr, datasetUsage)
		return flag.ErrHelp
	}
	switch args[0] {
	case "gen":
		return runDatasetGen(ctx, args[1:], stdout, stderr)
	case "verify":
		return runDatasetVerify(ctx, args[1:], stdout, stderr)
	}
	fmt.Fprint(stderr, datasetUsage)
	return fmt.Errorf("unknown dataset subcommand %q", args[0])
}

func runDatasetGen(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("dataset gen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pipeline := fs.String("pipeline", "pdf", "pipeline: pdf, pdfmini or video")
	docs := fs.Int("docs", 2000, "input records (documents, or videos for -pipeline video)")
	regimes := fs.Int("regimes", 0, "workload regimes in sequence (0 = all of the pipeline's types: pdf 3, video 2)")
	seed := fs.Uint64("seed", 1, "dataset seed (part of every record ID)")
	natsURL := fs.String("nats", envOr("nats://127.0.0.1:4222", "TRIDENT_NATS_URL"), "NATS URL")
	rate := fs.Float64("rate", 0, "input records per second (0 = as fast as the stream acks)")
	storage := fs.String("storage", "file", "stream storage if gen creates it: file | memory")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	p, err := worker.LookupPipeline(*pipeline)
	if err != nil {
		return err
	}
	if *regimes == 0 {
		*regimes = len(p.Regimes)
	}
	st, err := parseStorage(*storage)
	if err != nil {
		return err
	}
	log, _ := newLogger(stderr, "info")
	nc, js, err := connectWithin(ctx, *natsURL, "trident-dataset", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	spec := worker.Spec{Pipeline: p.Name, Docs: *docs, Regimes: *regimes, Seed: *seed}
	want, err := worker.Expected(p, spec)
	if err != nil {
		return err
	}
	if err := worker.Publish(ctx, js, p, spec, worker.PublishOptions{Rate: *rate, Storage: st}); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "published %d %s inputs (%d regimes, seed %d) to %s; the sink must receive %d records\n",
		spec.Docs, p.Name, spec.Regimes, spec.Seed, p.Subject(p.Operators[0].Name), len(want))
	return nil
}

func runDatasetVerify(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("dataset verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pipeline := fs.String("pipeline", "pdf", "pipeline: pdf, pdfmini or video")
	natsURL := fs.String("nats", envOr("nats://127.0.0.1:4222", "TRIDENT_NATS_URL"), "NATS URL")
	wait := fs.Duration("wait", 0, "poll until every expected record arrived or this much time passed (0 = check once)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	p, err := worker.LookupPipeline(*pipeline)
	if err != nil {
		return err
	}
	log, _ := newLogger(stderr, "info")
	nc, js, err := connectWithin(ctx, *natsURL, "trident-verify", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	var rep worker.Report
	if *wait > 0 {
		wctx, cancel := context.WithTimeout(ctx, *wait)
		defer cancel()
		rep, err = worker.WaitVerify(wctx, js, p, 2*time.Second)
		if err == nil && !rep.Complete() {
			// the deadline passed: take one last look with the parent context
			rep, err = worker.Verify(ctx, js, p)
		}
	} else {
		rep, err = worker.Verify(ctx, js, p)
	}
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return fmt.Errorf("encode report: %w", err)
		}
	} else {
		fmt.Fprintln(stdout, rep.String())
		for kind, ids := range rep.Samples {
			fmt.Fprintf(stdout, "  %s e.g. %v\n", kind, ids)
		}
	}
	if !rep.OK() {
		return errors.New(rep.String())
	}
	return nil
}
