package main

import (
	"context"
	"errors"
	"io"
)

// runBenchAdapt is not built yet.
func runBenchAdapt(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("not implemented yet")
}
