package main

import (
	"context"
	"errors"
	"io"
)

// runDemo is not built yet.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("not implemented yet")
}
