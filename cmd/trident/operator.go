package main

import (
	"context"
	"errors"
	"io"
)

// runOperator is not built yet.
func runOperator(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("not implemented yet")
}
