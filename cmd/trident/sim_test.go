package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"testing"
)

// The sim verb prints the per-operator table and, for Trident (the shipped planner), its
// loop's counters; a scheduler without them prints none.
func TestSimPrintsTridentCounters(t *testing.T) {
	var out, errb bytes.Buffer
	if err := runSim(context.Background(), []string{"-pipeline", "video", "-scale", "0.01", "-seed", "3"}, &out, &errb); err != nil {
		t.Fatalf("sim: %v (%s)", err, errb.String())
	}
	m := regexp.MustCompile(`Shipped planner: (\d+) rounds, (\d+) decisions \((\d+) failed\), (\d+) observations published`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no planner line in:\n%s", out.String())
	}
	rounds, _ := strconv.Atoi(m[1])
	decisions, _ := strconv.Atoi(m[2])
	failed, _ := strconv.Atoi(m[3])
	obs, _ := strconv.Atoi(m[4])
	// The planner takes over the submitted job at its first round (a decision), and the
	// feed publishes every operator's estimate each round once it was scraped twice.
	if rounds == 0 || decisions == 0 || failed > decisions || decisions > rounds || obs == 0 {
		t.Fatalf("planner: %d rounds, %d decisions (%d failed), %d observations: want 0 < decisions <= rounds, failed <= decisions, observations > 0",
			rounds, decisions, failed, obs)
	}
	if !bytes.Contains(out.Bytes(), []byte("caption")) {
		t.Fatalf("operator table missing:\n%s", out.String())
	}
	if bytes.Contains(errb.Bytes(), []byte("decision committed")) {
		t.Fatalf("the planner logged without -v:\n%s", errb.String())
	}
	out.Reset()
	errb.Reset()
	if err := runSim(context.Background(), []string{"-pipeline", "video", "-scale", "0.01", "-seed", "3", "-v"}, &out, &errb); err != nil {
		t.Fatalf("sim -v: %v", err)
	}
	// The planner takes over the submitted job at its first round: a committed decision.
	if !bytes.Contains(errb.Bytes(), []byte("decision committed")) {
		t.Fatalf("sim -v logged no planner decision:\n%s", errb.String())
	}
	out.Reset()
	if err := runSim(context.Background(), []string{"-pipeline", "video", "-scale", "0.01", "-scheduler", "static"}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(out.Bytes(), []byte("Shipped planner")) {
		t.Fatalf("static printed Trident counters:\n%s", out.String())
	}
}
