package configspace

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/trident-sched/trident/apm/opcontract"
)

// valueKind tells which field of a Value is meaningful.
type valueKind uint8

const (
	kindNumber valueKind = iota
	kindBool
	kindString
)

// Value is one parameter value: a number, a boolean or a categorical label.
// The zero Value is the number 0.
type Value struct {
	kind valueKind
	num  float64
	str  string
}

// Num returns a numeric Value.
func Num(v float64) Value { return Value{kind: kindNumber, num: v} }

// Bool returns a boolean Value.
func Bool(b bool) Value {
	if b {
		return Value{kind: kindBool, num: 1}
	}
	return Value{kind: kindBool}
}

// Str returns a categorical (string) Value.
func Str(s string) Value { return Value{kind: kindString, str: s} }

// Float returns the value as a number: numbers as is, booleans as 0/1, and categorical
// labels parsed as numbers when they are numeric (e.g. block sizes), NaN otherwise.
func (v Value) Float() float64 {
	switch v.kind {
	case kindString:
		f, err := strconv.ParseFloat(v.str, 64)
		if err != nil {
			return math.NaN()
		}
		return f
	default:
		return v.num
	}
}

// Int returns Float rounded to the nearest integer.
func (v Value) Int() int { return int(math.Round(v.Float())) }

// IsTrue reports whether the value is the boolean true (or a non-zero number).
func (v Value) IsTrue() bool {
	if v.kind == kindString {
		return v.str == "true"
	}
	return v.num != 0
}

// String formats the value as it appears in a Config string.
func (v Value) String() string {
	switch v.kind {
	case kindBool:
		return strconv.FormatBool(v.num != 0)
	case kindString:
		return v.str
	default:
		return strconv.FormatFloat(v.num, 'g', -1, 64)
	}
}

// parseValue infers the kind of a literal: true/false are booleans, numeric literals are
// numbers, everything else is a label.
func parseValue(s string) Value {
	switch s {
	case "true":
		return Bool(true)
	case "false":
		return Bool(false)
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
		return Num(f)
	}
	return Str(s)
}

// sameLiteral reports whether two literals denote the same value in a config string
// ("1" and "1.0" do): categorical choices must not, or a label would be ambiguous.
func sameLiteral(a, b string) bool { return parseValue(a) == parseValue(b) }

// Config is one assignment of values to parameter names.
type Config map[string]Value

// String returns the stable form "k=v,k=v" with keys in lexical order.
func (c Config) String() string { return opcontract.FormatSorted(c, Value.String) }

// Clone returns a copy of c.
func (c Config) Clone() Config {
	out := make(Config, len(c))
	for k, v := range c {
		out[k] = v
	}
	return out
}

// Float returns c[name].Float(), or NaN when name is absent.
func (c Config) Float(name string) float64 {
	v, ok := c[name]
	if !ok {
		return math.NaN()
	}
	return v.Float()
}

// Int returns c[name].Int() (0 when absent).
func (c Config) Int(name string) int {
	v, ok := c[name]
	if !ok {
		return 0
	}
	return v.Int()
}

// IsTrue returns c[name].IsTrue() (false when absent).
func (c Config) IsTrue(name string) bool { return c[name].IsTrue() }

// ParseConfig parses the form produced by Config.String ("k=v,k=v"; blanks around tokens are
// ignored, an empty string is the empty Config). Value kinds are inferred from the literals;
// use Space.ParseConfig to check them against a space.
func ParseConfig(s string) (Config, error) {
	c := Config{}
	if strings.TrimSpace(s) == "" {
		return c, nil
	}
	pos := 0
	for _, item := range strings.Split(s, ",") {
		start := pos
		pos += len(item) + 1
		k, v, ok := strings.Cut(item, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("configspace: config item %q at offset %d: want name=value", item, start)
		}
		if !validName(k) {
			return nil, fmt.Errorf("configspace: config item %q at offset %d: invalid name %q", item, start, k)
		}
		if _, dup := c[k]; dup {
			return nil, fmt.Errorf("configspace: config item %q at offset %d: duplicate name %q", item, start, k)
		}
		c[k] = parseValue(v)
	}
	return c, nil
}

// validName reports whether s is an identifier: a letter or '_' then letters, digits, '_'
// or '.' ('-' is excluded so that constraints such as "a-b >= 0" stay unambiguous).
func validName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z'):
		case i > 0 && (r == '.' || (r >= '0' && r <= '9')):
		default:
			return false
		}
	}
	return true
}
