package main

import (
	"context"
	"errors"
	"io"
)

// runPlanner is not built yet.
func runPlanner(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("not implemented yet")
}
