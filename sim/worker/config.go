package worker

import (
	"fmt"
	"strconv"

	"github.com/trident-sched/trident/apm/opcontract"
)

// Config is an operator's tunable configuration, written "k=v,k=v" (the trident_config group
// meta and the TRIDENT_CONFIG environment variable).
type Config map[string]string

// ParseConfig parses "k=v,k=v" (opcontract.ParseConfig). Whitespace around keys and values
// is ignored; an empty string is an empty config.
func ParseConfig(s string) (Config, error) {
	c, err := opcontract.ParseConfig(s)
	return Config(c), err
}

// String renders the config in canonical (sorted) "k=v,k=v" form.
func (c Config) String() string { return opcontract.FormatConfig(c) }

// Merge returns a copy of c with the entries of over replacing its own.
func (c Config) Merge(over Config) Config {
	out := Config{}
	for k, v := range c {
		out[k] = v
	}
	for k, v := range over {
		out[k] = v
	}
	return out
}

// Float returns the value of key as a float64, or def when absent.
func (c Config) Float(key string, def float64) (float64, error) {
	v, ok := c[key]
	if !ok {
		return def, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return def, fmt.Errorf("config %s=%q: not a number", key, v)
	}
	return f, nil
}

// Int returns the value of key as an int, or def when absent.
func (c Config) Int(key string, def int) (int, error) {
	f, err := c.Float(key, float64(def))
	if err != nil {
		return def, err
	}
	if f != float64(int(f)) {
		return def, fmt.Errorf("config %s=%v: not an integer", key, f)
	}
	return int(f), nil
}

// knob reads a float knob for a behaviour model, falling back to def on absence or error (the
// operator validates its config once at start with Validate, so models can stay total).
func (c Config) knob(key string, def float64) float64 {
	f, err := c.Float(key, def)
	if err != nil {
		return def
	}
	return f
}
