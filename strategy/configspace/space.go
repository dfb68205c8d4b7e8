// Package configspace declares the tunable configuration space of an operator, maps
// configurations to and from the unit hypercube searched by Bayesian optimisation, and
// formats and parses configurations ("k=v,k=v").
//
// A space is declared in a job file's group meta (key trident_params) as one string of
// statements separated by ';' or newlines:
//
//	max_num_seqs=int[8,512,log] default 64;
//	max_num_batched_tokens=int[1024,65536,log];
//	block_size=cat{8,16,32} default 16;
//	chunked_prefill=bool;
//	scheduler_delay=float[0,1];
//	constraint: max_num_batched_tokens >= max_num_seqs
//
// Types are int[lo,hi], float[lo,hi] (either with a trailing ",log" for a log scale),
// bool and cat{a,b,...}. "default v" is optional (otherwise: the lower bound of a linear
// range, the geometric midpoint of a log range, false, the first label). Labels that read
// as numbers are matched by value ("ratio=1" selects the label 1.0 of cat{0.5,1.0}), so two
// labels of one parameter must not share a value (cat{1,1.0} is refused). A constraint
// compares two linear expressions of parameters and numbers, e.g. "a >= 2*b + 16", with one
// of >=, <=, >, <.
package configspace

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Kind is the type of a parameter.
type Kind int

// Parameter kinds.
const (
	Int Kind = iota
	Float
	Boolean
	Categorical
)

// String returns the keyword of the kind in the declaration syntax.
func (k Kind) String() string {
	switch k {
	case Int:
		return "int"
	case Float:
		return "float"
	case Boolean:
		return "bool"
	case Categorical:
		return "cat"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Param is one tunable parameter.
type Param struct {
	// Name identifies the parameter in configs.
	Name string
	// Kind is its type.
	Kind Kind
	// Min and Max bound Int and Float parameters (inclusive).
	Min, Max float64
	// Log maps Int and Float ranges to the unit interval on a log scale (Min > 0).
	Log bool
	// Choices lists the labels of a Categorical parameter, in declaration order.
	Choices []string
	// Default is the value used when nothing better is known.
	Default Value
}

// Term is coef*Param, or the constant coef when Param is empty.
type Term struct {
	Coef  float64
	Param string
}

// Constraint requires Left Op Right, each side a sum of terms.
type Constraint struct {
	Left, Right []Term
	// Op is one of ">=", "<=", ">", "<".
	Op string
}

// Space is an operator's configuration space.
type Space struct {
	Params      []Param
	Constraints []Constraint
	index       map[string]int
	// logMin and logMax hold log(Min) and log(Max) of each log-scaled parameter (the
	// hot path of a search's candidate generation decodes and encodes thousands of points).
	logMin, logMax []float64
}

// New builds a space from parameters and constraints and checks them.
func New(params []Param, constraints []Constraint) (*Space, error) {
	s := &Space{Params: params, Constraints: constraints, index: map[string]int{},
		logMin: make([]float64, len(params)), logMax: make([]float64, len(params))}
	for i, p := range params {
		if err := checkParam(p); err != nil {
			return nil, err
		}
		if p.Log {
			s.logMin[i], s.logMax[i] = math.Log(p.Min), math.Log(p.Max)
		}
		if _, dup := s.index[p.Name]; dup {
			return nil, fmt.Errorf("configspace: parameter %q declared twice", p.Name)
		}
		s.index[p.Name] = i
	}
	for _, c := range constraints {
		for _, t := range append(append([]Term(nil), c.Left...), c.Right...) {
			if t.Param == "" {
				continue
			}
			i, ok := s.index[t.Param]
			if !ok {
				return nil, fmt.Errorf("configspace: constraint %s names unknown parameter %q", c, t.Param)
			}
			if k := params[i].Kind; k != Int && k != Float {
				return nil, fmt.Errorf("configspace: constraint %s uses %s parameter %q; only int and float may be compared", c, k, t.Param)
			}
		}
		switch c.Op {
		case ">=", "<=", ">", "<":
		default:
			return nil, fmt.Errorf("configspace: constraint %s: unknown operator %q", c, c.Op)
		}
	}
	return s, nil
}

// MustParse is Parse for declarations known to be valid (tests, built-in operator models);
// it panics on error.
func MustParse(decl string) *Space {
	s, err := Parse(decl)
	if err != nil {
		panic(err)
	}
	return s
}

func checkParam(p Param) error {
	if !validName(p.Name) {
		return fmt.Errorf("configspace: invalid parameter name %q", p.Name)
	}
	switch p.Kind {
	case Int, Float:
		if math.IsNaN(p.Min) || math.IsNaN(p.Max) || math.IsInf(p.Min, 0) || math.IsInf(p.Max, 0) || p.Min > p.Max {
			return fmt.Errorf("configspace: parameter %q: range [%v,%v] is empty or not finite", p.Name, p.Min, p.Max)
		}
		if p.Kind == Int && (p.Min != math.Trunc(p.Min) || p.Max != math.Trunc(p.Max)) {
			return fmt.Errorf("configspace: parameter %q: int range [%v,%v] has non-integer bounds", p.Name, p.Min, p.Max)
		}
		if p.Log && p.Min <= 0 {
			return fmt.Errorf("configspace: parameter %q: log range needs a positive lower bound, got %v", p.Name, p.Min)
		}
	case Categorical:
		if len(p.Choices) == 0 {
			return fmt.Errorf("configspace: parameter %q: categorical needs at least one choice", p.Name)
		}
		seen := map[Value]bool{}
		for _, c := range p.Choices {
			if c == "" || strings.ContainsAny(c, ",;={} \t\n") {
				return fmt.Errorf("configspace: parameter %q: invalid choice %q", p.Name, c)
			}
			key := parseValue(c) // choices that share a value are duplicates (sameLiteral)
			if seen[key] {
				return fmt.Errorf("configspace: parameter %q: duplicate choice %q", p.Name, c)
			}
			seen[key] = true
		}
	case Boolean:
	default:
		return fmt.Errorf("configspace: parameter %q: unknown kind %d", p.Name, int(p.Kind))
	}
	if _, err := normalise(p, p.Default); err != nil {
		return fmt.Errorf("configspace: parameter %q: default: %w", p.Name, err)
	}
	return nil
}

// Dim returns the dimension of the unit hypercube (one coordinate per parameter).
func (s *Space) Dim() int { return len(s.Params) }

// Param returns the parameter called name.
func (s *Space) Param(name string) (Param, bool) {
	i, ok := s.index[name]
	if !ok {
		return Param{}, false
	}
	return s.Params[i], true
}

// Default returns the configuration of all defaults.
func (s *Space) Default() Config {
	c := Config{}
	for _, p := range s.Params {
		c[p.Name] = p.Default
	}
	return c
}

// Decode maps a point of the unit hypercube to a configuration. Coordinates outside [0,1]
// are clamped. Integers are rounded and categorical/boolean coordinates are binned, so
// Encode(Decode(u)) is the canonical representative of u's cell.
func (s *Space) Decode(u []float64) (Config, error) {
	if len(u) != len(s.Params) {
		return nil, fmt.Errorf("configspace: decode %d coordinates in a %d-parameter space", len(u), len(s.Params))
	}
	c := make(Config, len(s.Params))
	for i, p := range s.Params {
		if math.IsNaN(u[i]) {
			return nil, fmt.Errorf("configspace: decode parameter %q: coordinate is NaN", p.Name)
		}
		c[p.Name] = s.decodeValue(i, u[i])
	}
	return c, nil
}

// decodeValue maps coordinate x (clamped to [0,1]) to parameter i's value.
func (s *Space) decodeValue(i int, x float64) Value {
	p := &s.Params[i]
	x = math.Max(0, math.Min(1, x))
	switch p.Kind {
	case Int, Float:
		var v float64
		if p.Log {
			v = math.Exp(s.logMin[i] + x*(s.logMax[i]-s.logMin[i]))
		} else {
			v = p.Min + x*(p.Max-p.Min)
		}
		if p.Kind == Int {
			v = math.Round(v)
		}
		return Num(math.Max(p.Min, math.Min(p.Max, v)))
	case Boolean:
		return Bool(x >= 0.5)
	default: // Categorical
		n := len(p.Choices)
		return Str(p.Choices[min(n-1, int(x*float64(n)))])
	}
}

// Snap writes Encode(Decode(u)) to dst (length Dim), the canonical point of u's cell,
// without building the configuration, and reports whether that configuration meets every
// constraint. Two points snap to the same dst exactly when they decode to the same
// configuration, so the bits of dst identify it (what a search deduplicates by). It fails
// on a length mismatch or a NaN coordinate.
func (s *Space) Snap(u, dst []float64) (bool, error) {
	if len(u) != len(s.Params) || len(dst) != len(s.Params) {
		return false, fmt.Errorf("configspace: snap %d coordinates into %d in a %d-parameter space", len(u), len(dst), len(s.Params))
	}
	var vals []float64 // decoded values, for the constraints
	if len(s.Constraints) > 0 {
		vals = make([]float64, len(s.Params))
	}
	for i, p := range s.Params {
		if math.IsNaN(u[i]) {
			return false, fmt.Errorf("configspace: snap parameter %q: coordinate is NaN", p.Name)
		}
		v := s.decodeValue(i, u[i])
		dst[i] = s.encodeValue(i, v)
		if vals != nil {
			vals[i] = v.Float()
		}
	}
	for _, con := range s.Constraints {
		if !con.holds(func(name string) float64 { return vals[s.index[name]] }) {
			return false, nil
		}
	}
	return true, nil
}

// Encode maps a configuration to the unit hypercube. It fails when a parameter is missing
// or its value does not belong to the parameter (constraints are not checked: see Check).
func (s *Space) Encode(c Config) ([]float64, error) {
	u := make([]float64, len(s.Params))
	for i, p := range s.Params {
		raw, ok := c[p.Name]
		if !ok {
			return nil, fmt.Errorf("configspace: encode: parameter %q missing", p.Name)
		}
		v, err := normalise(p, raw)
		if err != nil {
			return nil, fmt.Errorf("configspace: encode parameter %q: %w", p.Name, err)
		}
		u[i] = s.encodeValue(i, v)
	}
	return u, nil
}

// encodeValue maps parameter i's canonical value v (see normalise) to its coordinate.
func (s *Space) encodeValue(i int, v Value) float64 {
	p := &s.Params[i]
	switch p.Kind {
	case Int, Float:
		switch {
		case p.Max == p.Min:
			return 0.5
		case p.Log:
			return (math.Log(v.num) - s.logMin[i]) / (s.logMax[i] - s.logMin[i])
		default:
			return (v.num - p.Min) / (p.Max - p.Min)
		}
	case Boolean:
		if v.num != 0 {
			return 0.75
		}
		return 0.25
	default: // Categorical
		for j, ch := range p.Choices {
			if ch == v.str {
				return (float64(j) + 0.5) / float64(len(p.Choices))
			}
		}
		return 0
	}
}

// normalise converts v to the canonical Value of parameter p or explains why it cannot.
func normalise(p Param, v Value) (Value, error) {
	switch p.Kind {
	case Int, Float:
		if v.kind != kindNumber {
			return Value{}, fmt.Errorf("value %q is not a number", v)
		}
		if p.Kind == Int && v.num != math.Trunc(v.num) {
			return Value{}, fmt.Errorf("value %v is not an integer", v.num)
		}
		if v.num < p.Min || v.num > p.Max {
			return Value{}, fmt.Errorf("value %v outside [%v,%v]", v.num, p.Min, p.Max)
		}
		return v, nil
	case Boolean:
		if v.kind != kindBool {
			return Value{}, fmt.Errorf("value %q is not true or false", v)
		}
		return v, nil
	case Categorical:
		lbl := v.String()
		for _, ch := range p.Choices {
			if ch == lbl {
				return Str(lbl), nil
			}
		}
		// A label that reads as a number ("1.0", "08", "1e3") comes back from a config
		// string as that number, whose canonical form is another string; choices never
		// share a value (sameLiteral), so the match is unique.
		if v.kind != kindString {
			for _, ch := range p.Choices {
				if parseValue(ch) == v {
					return Str(ch), nil
				}
			}
		}
		return Value{}, fmt.Errorf("value %q is not one of {%s}", lbl, strings.Join(p.Choices, ","))
	}
	return Value{}, fmt.Errorf("unknown kind %d", int(p.Kind))
}

// Check validates c against the space: every parameter present with a valid value, no
// unknown names, all constraints satisfied. It returns c with canonical values (e.g.
// categorical labels parsed from numbers become labels).
func (s *Space) Check(c Config) (Config, error) {
	out := make(Config, len(s.Params))
	for _, p := range s.Params {
		raw, ok := c[p.Name]
		if !ok {
			return nil, fmt.Errorf("configspace: parameter %q missing", p.Name)
		}
		v, err := normalise(p, raw)
		if err != nil {
			return nil, fmt.Errorf("configspace: parameter %q: %w", p.Name, err)
		}
		out[p.Name] = v
	}
	for k := range c {
		if _, ok := s.index[k]; !ok {
			return nil, fmt.Errorf("configspace: unknown parameter %q", k)
		}
	}
	for _, con := range s.Constraints {
		if !con.Holds(out) {
			return nil, fmt.Errorf("configspace: constraint %s violated by %s", con, out)
		}
	}
	return out, nil
}

// Satisfies reports whether c meets every constraint (values are not range-checked).
func (s *Space) Satisfies(c Config) bool {
	for _, con := range s.Constraints {
		if !con.Holds(c) {
			return false
		}
	}
	return true
}

// ParseConfig parses "k=v,k=v" and checks it against the space (see Check).
func (s *Space) ParseConfig(str string) (Config, error) {
	c, err := ParseConfig(str)
	if err != nil {
		return nil, err
	}
	return s.Check(c)
}

// Grid returns every configuration of a grid with `levels` evenly spaced values per
// numeric parameter (its bounds included; levels >= 2), both booleans and every label,
// that satisfies the constraints, in lexicographic order of the parameters.
func (s *Space) Grid(levels int) ([]Config, error) {
	if levels < 2 {
		return nil, fmt.Errorf("configspace: grid needs at least 2 levels, got %d", levels)
	}
	axes := make([][]float64, len(s.Params))
	for i, p := range s.Params {
		switch p.Kind {
		case Int, Float:
			for l := range levels {
				axes[i] = append(axes[i], float64(l)/float64(levels-1))
			}
		case Boolean:
			axes[i] = []float64{0.25, 0.75}
		case Categorical:
			for j := range p.Choices {
				axes[i] = append(axes[i], (float64(j)+0.5)/float64(len(p.Choices)))
			}
		}
	}
	var out []Config
	seen := map[string]bool{}
	idx := make([]int, len(axes))
	u := make([]float64, len(axes))
	for {
		for i := range axes {
			u[i] = axes[i][idx[i]]
		}
		c, err := s.Decode(u)
		if err != nil {
			return nil, err
		}
		if k := c.String(); s.Satisfies(c) && !seen[k] {
			seen[k] = true
			out = append(out, c)
		}
		i := len(idx) - 1
		for ; i >= 0; i-- {
			idx[i]++
			if idx[i] < len(axes[i]) {
				break
			}
			idx[i] = 0
		}
		if i < 0 {
			return out, nil
		}
	}
}

// Holds reports whether c satisfies the constraint; a missing or non-numeric value fails it.
func (con Constraint) Holds(c Config) bool { return con.holds(c.Float) }

// holds evaluates the constraint with val giving a parameter's numeric value.
func (con Constraint) holds(val func(string) float64) bool {
	l, r := evalSide(con.Left, val), evalSide(con.Right, val)
	if math.IsNaN(l) || math.IsNaN(r) {
		return false
	}
	switch con.Op {
	case ">=":
		return l >= r
	case "<=":
		return l <= r
	case ">":
		return l > r
	case "<":
		return l < r
	}
	return false
}

func evalSide(ts []Term, val func(string) float64) float64 {
	var s float64
	for _, t := range ts {
		if t.Param == "" {
			s += t.Coef
			continue
		}
		s += t.Coef * val(t.Param)
	}
	return s
}

// String formats the constraint in the declaration syntax.
func (con Constraint) String() string {
	return sideString(con.Left) + " " + con.Op + " " + sideString(con.Right)
}

func sideString(ts []Term) string {
	var b strings.Builder
	for i, t := range ts {
		coef := t.Coef
		if i > 0 {
			if coef < 0 {
				b.WriteString(" - ")
				coef = -coef
			} else {
				b.WriteString(" + ")
			}
		}
		num := strconv.FormatFloat(coef, 'g', -1, 64)
		switch {
		case t.Param == "":
			b.WriteString(num)
		case coef == 1:
			b.WriteString(t.Param)
		default:
			b.WriteString(num + "*" + t.Param)
		}
	}
	return b.String()
}

// String returns the space in the declaration syntax (Parse(s.String()) is equivalent to s).
func (s *Space) String() string {
	var parts []string
	for _, p := range s.Params {
		var t string
		switch p.Kind {
		case Int, Float:
			t = fmt.Sprintf("%s[%s,%s", p.Kind, strconv.FormatFloat(p.Min, 'g', -1, 64), strconv.FormatFloat(p.Max, 'g', -1, 64))
			if p.Log {
				t += ",log"
			}
			t += "]"
		case Boolean:
			t = "bool"
		case Categorical:
			t = "cat{" + strings.Join(p.Choices, ",") + "}"
		}
		parts = append(parts, p.Name+"="+t+" default "+p.Default.String())
	}
	for _, c := range s.Constraints {
		parts = append(parts, "constraint: "+c.String())
	}
	return strings.Join(parts, "; ")
}
