package main

import (
	"context"
	"errors"
	"io"
)

// runDataset is not built yet.
func runDataset(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("not implemented yet")
}
