package main

import (
	"context"
	"errors"
	"io"
)

// runBenchMILP is not built yet.
func runBenchMILP(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("not implemented yet")
}
