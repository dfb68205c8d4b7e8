package main

import (
	"context"
	"errors"
	"io"
)

// runSim is not built yet.
func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("not implemented yet")
}
