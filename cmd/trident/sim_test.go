package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"testing"
)

// The sim verb prints the per-operator table and, for Trident, the control loop's
// counters; a scheduler without them prints none.
func TestSimPrintsTridentCounters(t *testing.T) {
	var out, errb bytes.Buffer
	if err := runSim(context.Background(), []string{"-pipeline", "video", "-scale", "0.01", "-seed", "3"}, &out, &errb); err != nil {
		t.Fatalf("sim: %v (%s)", err, errb.String())
	}
	m := regexp.MustCompile(`Trident control loop: (\d+) invocations, (\d+) MILP rounds; (\d+) regime shifts`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no control-loop line in:\n%s", out.String())
	}
	inv, _ := strconv.Atoi(m[1])
	rounds, _ := strconv.Atoi(m[2])
	if inv == 0 || rounds == 0 || rounds > inv {
		t.Fatalf("control loop: %d invocations, %d rounds: want 0 < rounds <= invocations", inv, rounds)
	}
	if !bytes.Contains(out.Bytes(), []byte("caption")) {
		t.Fatalf("operator table missing:\n%s", out.String())
	}
	out.Reset()
	if err := runSim(context.Background(), []string{"-pipeline", "video", "-scale", "0.01", "-scheduler", "static"}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(out.Bytes(), []byte("control loop")) {
		t.Fatalf("static printed Trident counters:\n%s", out.String())
	}
}
