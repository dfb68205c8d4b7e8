package baseline

import (
	"errors"
	"io"
)

// closeParts closes every distinct part that is an io.Closer (the shared layers of the
// controlled comparison run a planner; one object may serve as capacity source and
// advisor both).
func closeParts(parts ...any) error {
	var errs []error
	seen := map[any]bool{}
	for _, p := range parts {
		c, ok := p.(io.Closer)
		if !ok || seen[c] {
			continue
		}
		seen[c] = true
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// Close implements io.Closer: it closes the capacity source and the advisor.
func (d *DS2) Close() error { return closeParts(d.Capacity, d.Advisor) }

// Close implements io.Closer: it closes the advisor.
func (r *RayData) Close() error { return closeParts(r.Advisor) }
