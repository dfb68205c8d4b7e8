package observe

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
)

// OperatorSpec declares an operator to the Layer.
type OperatorSpec struct {
	// Features names the workload features, in the order of Sample.Features (e.g.
	// token_in_mean, token_in_std, token_out_mean, token_out_std for an LLM operator;
	// resolution, batch_size for a vision operator). At least one is required.
	Features []string
	// Config configures the operator's two-stage GP estimator.
	Config Config
}

// Layer is the observation layer: one two-stage GP estimator per operator, with
// configuration epochs. It is safe for concurrent use; operations on different operators
// do not block each other.
type Layer struct {
	log *slog.Logger
	mu  sync.RWMutex
	ops map[string]*operator
}

type operator struct {
	mu       sync.Mutex
	features []string
	epoch    uint64
	est      *GPEstimator
}

// NewLayer returns an empty layer; logger may be nil for slog.Default().
func NewLayer(logger *slog.Logger) *Layer {
	if logger == nil {
		logger = slog.Default()
	}
	return &Layer{log: logger, ops: map[string]*operator{}}
}

// Register declares operator op. Registering a name twice is an error.
func (l *Layer) Register(op string, spec OperatorSpec) error {
	if op == "" {
		return fmt.Errorf("observe: register: empty operator name")
	}
	if len(spec.Features) == 0 {
		return fmt.Errorf("observe: register %q: no workload features declared", op)
	}
	if spec.Config.Logger == nil {
		spec.Config.Logger = l.log.With("operator", op)
	}
	est, err := NewGPEstimator(len(spec.Features), FilterTwoStage, spec.Config)
	if err != nil {
		return fmt.Errorf("observe: register %q: %w", op, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.ops[op]; ok {
		return fmt.Errorf("observe: register %q: already registered", op)
	}
	l.ops[op] = &operator{features: slices.Clone(spec.Features), est: est}
	return nil
}

func (l *Layer) get(op string) (*operator, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	o, ok := l.ops[op]
	if !ok {
		return nil, fmt.Errorf("observe: operator %q: %w", op, ErrUnknownOperator)
	}
	return o, nil
}

// Operators returns the registered operator names, sorted.
func (l *Layer) Operators() []string {
	l.mu.RLock()
	defer l.mu.RUnlock()
	names := make([]string, 0, len(l.ops))
	for n := range l.ops {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Features returns the feature names operator op declared.
func (l *Layer) Features(op string) ([]string, error) {
	o, err := l.get(op)
	if err != nil {
		return nil, err
	}
	return slices.Clone(o.features), nil
}

// Observe offers a sample of operator op. Samples from an epoch older than the operator's
// are rejected as stale; a sample from a newer epoch means an invalidation was missed, so the
// operator is reset to that epoch first.
func (l *Layer) Observe(op string, s Sample) (accepted bool, reason string) {
	return l.ObserveContext(context.Background(), op, s)
}

// ObserveContext is Observe with a context bounding the hyperparameter refit the sample may
// trigger (see GPEstimator.ObserveContext).
func (l *Layer) ObserveContext(ctx context.Context, op string, s Sample) (accepted bool, reason string) {
	o, err := l.get(op)
	if err != nil {
		return false, ReasonUnknownOperator
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case s.Epoch < o.epoch:
		return false, ReasonStaleEpoch
	case s.Epoch > o.epoch:
		l.log.Info("observe: sample from a newer config epoch; resetting operator",
			"operator", op, "epoch", o.epoch, "sample_epoch", s.Epoch)
		o.epoch = s.Epoch
		o.est.Reset()
	}
	return o.est.ObserveContext(ctx, s)
}

// Capacity returns operator op's capacity estimate at the given features.
func (l *Layer) Capacity(op string, features []float64) (Estimate, error) {
	o, err := l.get(op)
	if err != nil {
		return Estimate{}, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	e, err := o.est.Estimate(features)
	if err != nil {
		return Estimate{}, fmt.Errorf("observe: operator %q epoch %d: %w", op, o.epoch, err)
	}
	e.Epoch = o.epoch
	return e, nil
}

// Invalidate resets operator op after a committed configuration change: its epoch
// increments, its samples are dropped and it returns to the EMA cold start. Samples of older
// epochs arriving later are rejected. Unknown operators are ignored (and logged).
func (l *Layer) Invalidate(op string) {
	o, err := l.get(op)
	if err != nil {
		l.log.Warn("observe: invalidate", "err", err)
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.epoch++
	o.est.Reset()
}

// Epoch returns operator op's current configuration epoch.
func (l *Layer) Epoch(op string) (uint64, error) {
	o, err := l.get(op)
	if err != nil {
		return 0, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.epoch, nil
}
