package main

import (
	"context"
	"errors"
	"io"
)

// runBenchObserve is not built yet.
func runBenchObserve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("not implemented yet")
}
