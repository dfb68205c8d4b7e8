package main

import (
	"context"
	"errors"
	"io"
)

// runBenchE2E is not built yet.
func runBenchE2E(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("not implemented yet")
}
