// Command trident is the single entry point of Trident for Nomad: the planner service,
// the pipeline simulator, the benchmarks and the local demo.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// command is one `trident <verb>`.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() map[string]command {
	return map[string]command{
		"bench":    {"run a benchmark: observe | adapt | milp | e2e | planner | transitions", runBench},
		"planner":  {"run one raft-replicated planner server", runPlanner},
		"sim":      {"simulate a pipeline under one scheduler", runSim},
		"demo":     {"run the local Nomad demo of the PDF pipeline", runDemo},
		"operator": {"run one simulated pipeline operator (NATS in/out, Prometheus metrics)", runOperator},
		"dataset":  {"generate an input dataset with workload regime shifts", runDataset},
		"pipeline": {"register, list, inspect and delete the planner's pipelines", runPipeline},
		"version":  {"print the version", runVersion},
	}
}

// runVersion prints the version.
func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "trident", version)
	return nil
}

// version is stamped at build time with -ldflags "-X main.version=...".
var version = "dev"

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: trident <command> [flags]\n\ncommands:")
	cmds := commands()
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-9s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'trident <command> -h' for the flags of a command.")
}

// errUsage marks a command-line error the flag package has already reported together
// with the command's flags; main then exits 2 without printing it again.
var errUsage = errors.New("usage")

// parseFlags parses args into fs. Every verb takes flags only, so positional arguments
// are refused rather than ignored.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q: flags only (see 'trident %s -h')", fs.Args(), fs.Name())
	}
	return nil
}

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		usage(os.Stderr)
		os.Exit(2)
	}
	cmd, ok := commands()[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "trident: unknown command %q\n\n", os.Args[1])
		usage(os.Stderr)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := cmd.run(ctx, os.Args[2:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) || errors.Is(err, errUsage) {
			os.Exit(2)
		}
		fmt.Fprintf(os.Stderr, "trident %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}
