package configspace

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseError reports a malformed declaration: the parameter (or constraint) it concerns and
// the byte offset in the declaration string.
type ParseError struct {
	// Param is the parameter name, or "constraint" for a constraint statement, or "" when
	// the statement has no recognisable name.
	Param string
	// Offset is the 0-based byte offset of the offending token in the declaration.
	Offset int
	// Msg explains the problem.
	Msg string
}

// Error implements error.
func (e *ParseError) Error() string {
	if e.Param == "" {
		return fmt.Sprintf("configspace: offset %d: %s", e.Offset, e.Msg)
	}
	if e.Param == "constraint" {
		return fmt.Sprintf("configspace: constraint at offset %d: %s", e.Offset, e.Msg)
	}
	return fmt.Sprintf("configspace: parameter %q at offset %d: %s", e.Param, e.Offset, e.Msg)
}

// Parse parses a space declaration (see the package documentation for the syntax).
func Parse(decl string) (*Space, error) {
	var params []Param
	var cons []Constraint
	names := map[string]bool{}
	start := 0
	for i := 0; i <= len(decl); i++ {
		if i < len(decl) && decl[i] != ';' && decl[i] != '\n' {
			continue
		}
		stmt := decl[start:i]
		off := start + (len(stmt) - len(strings.TrimLeft(stmt, " \t\r")))
		stmt = strings.TrimSpace(stmt)
		start = i + 1
		if stmt == "" {
			continue
		}
		if rest, ok := strings.CutPrefix(stmt, "constraint:"); ok {
			c, err := parseConstraint(rest, off+len("constraint:"))
			if err != nil {
				return nil, err
			}
			cons = append(cons, c)
			continue
		}
		p, err := parseParam(stmt, off)
		if err != nil {
			return nil, err
		}
		if names[p.Name] {
			return nil, &ParseError{Param: p.Name, Offset: off, Msg: "declared twice"}
		}
		names[p.Name] = true
		params = append(params, p)
	}
	if len(params) == 0 {
		return nil, &ParseError{Offset: 0, Msg: "no parameters declared"}
	}
	for _, c := range cons {
		for _, t := range append(append([]Term(nil), c.Left...), c.Right...) {
			if t.Param != "" && !names[t.Param] {
				return nil, &ParseError{Param: "constraint", Offset: strings.Index(decl, "constraint:"), Msg: fmt.Sprintf("%s names undeclared parameter %q", c, t.Param)}
			}
		}
	}
	s, err := New(params, cons)
	if err != nil {
		return nil, fmt.Errorf("configspace: parse: %w", err)
	}
	return s, nil
}

// parseParam parses "name=type [default v]" starting at byte offset off.
func parseParam(stmt string, off int) (Param, error) {
	name, typ, ok := strings.Cut(stmt, "=")
	name = strings.TrimSpace(name)
	if !ok {
		return Param{}, &ParseError{Param: name, Offset: off, Msg: "want name=type, e.g. batch=int[1,64]"}
	}
	if !validName(name) {
		return Param{}, &ParseError{Param: name, Offset: off, Msg: "invalid name (letters, digits, '_', '.'; not starting with a digit)"}
	}
	eq := strings.Index(stmt, "=")
	toff := off + eq + 1 + len(typ) - len(strings.TrimLeft(typ, " \t"))
	typ = strings.TrimSpace(typ)
	p := Param{Name: name}
	var def string
	if body, d, ok := strings.Cut(typ, " default "); ok {
		typ, def = strings.TrimSpace(body), strings.TrimSpace(d)
		if def == "" {
			return Param{}, &ParseError{Param: name, Offset: toff + len(body), Msg: "empty default"}
		}
	}
	perr := func(delta int, format string, args ...any) error {
		return &ParseError{Param: name, Offset: toff + delta, Msg: fmt.Sprintf(format, args...)}
	}
	switch {
	case typ == "bool":
		p.Kind = Boolean
		p.Default = Bool(false)
	case strings.HasPrefix(typ, "cat{"):
		if !strings.HasSuffix(typ, "}") {
			return Param{}, perr(len(typ), "missing closing '}'")
		}
		p.Kind = Categorical
		pos := len("cat{")
		for _, ch := range strings.Split(typ[len("cat{"):len(typ)-1], ",") {
			ch = strings.TrimSpace(ch)
			if ch == "" || strings.ContainsAny(ch, "={} \t") {
				return Param{}, perr(pos, "invalid choice %q", ch)
			}
			for _, prev := range p.Choices {
				if sameLiteral(prev, ch) {
					return Param{}, perr(pos, "duplicate choice %q (the same value as %q)", ch, prev)
				}
			}
			p.Choices = append(p.Choices, ch)
			pos += len(ch) + 1
		}
		p.Default = Str(p.Choices[0])
	case strings.HasPrefix(typ, "int[") || strings.HasPrefix(typ, "float["):
		p.Kind = Int
		kw := "int["
		if strings.HasPrefix(typ, "float[") {
			p.Kind, kw = Float, "float["
		}
		if !strings.HasSuffix(typ, "]") {
			return Param{}, perr(len(typ), "missing closing ']'")
		}
		args := strings.Split(typ[len(kw):len(typ)-1], ",")
		if len(args) == 3 {
			if strings.TrimSpace(args[2]) != "log" {
				return Param{}, perr(len(kw), "third range argument must be \"log\", got %q", strings.TrimSpace(args[2]))
			}
			p.Log = true
		} else if len(args) != 2 {
			return Param{}, perr(len(kw), "range wants [min,max] or [min,max,log]")
		}
		var err error
		if p.Min, err = strconv.ParseFloat(strings.TrimSpace(args[0]), 64); err != nil {
			return Param{}, perr(len(kw), "lower bound %q is not a number", strings.TrimSpace(args[0]))
		}
		if p.Max, err = strconv.ParseFloat(strings.TrimSpace(args[1]), 64); err != nil {
			return Param{}, perr(len(kw)+len(args[0])+1, "upper bound %q is not a number", strings.TrimSpace(args[1]))
		}
		if math.IsNaN(p.Min) || math.IsNaN(p.Max) || math.IsInf(p.Min, 0) || math.IsInf(p.Max, 0) || p.Min > p.Max {
			return Param{}, perr(len(kw), "range [%v,%v] is empty or not finite", p.Min, p.Max)
		}
		if p.Kind == Int && (p.Min != math.Trunc(p.Min) || p.Max != math.Trunc(p.Max)) {
			return Param{}, perr(len(kw), "int range [%v,%v] has non-integer bounds", p.Min, p.Max)
		}
		if p.Log && p.Min <= 0 {
			return Param{}, perr(len(kw), "log range needs a positive lower bound, got %v", p.Min)
		}
		p.Default = Num(p.Min)
		if p.Log {
			g := math.Sqrt(p.Min * p.Max)
			if p.Kind == Int {
				g = math.Round(g)
			}
			p.Default = Num(g)
		}
	default:
		return Param{}, perr(0, "unknown type %q (want int[..], float[..], bool or cat{..})", typ)
	}
	if def != "" {
		v, err := normalise(p, parseValue(def))
		if err != nil {
			return Param{}, perr(len(typ)+1, "default: %v", err)
		}
		p.Default = v
	}
	return p, nil
}

// parseConstraint parses "lhs op rhs" starting at byte offset off.
func parseConstraint(s string, off int) (Constraint, error) {
	for _, op := range []string{">=", "<=", ">", "<"} {
		i := strings.Index(s, op)
		if i < 0 {
			continue
		}
		l, err := parseSide(s[:i], off)
		if err != nil {
			return Constraint{}, err
		}
		r, err := parseSide(s[i+len(op):], off+i+len(op))
		if err != nil {
			return Constraint{}, err
		}
		return Constraint{Left: l, Right: r, Op: op}, nil
	}
	return Constraint{}, &ParseError{Param: "constraint", Offset: off, Msg: fmt.Sprintf("%q has no comparison (>=, <=, >, <)", strings.TrimSpace(s))}
}

// parseSide parses a sum of terms "t (+|- t)*", each term a number, a name or number*name.
func parseSide(s string, off int) ([]Term, error) {
	var ts []Term
	sign := 1.0
	pos := 0
	tok := func() (string, int) {
		for pos < len(s) && (s[pos] == ' ' || s[pos] == '\t') {
			pos++
		}
		st := pos
		for pos < len(s) && !strings.ContainsRune(" \t+-", rune(s[pos])) {
			// allow exponents like 1e-3
			if (s[pos] == 'e' || s[pos] == 'E') && pos+1 < len(s) && (s[pos+1] == '-' || s[pos+1] == '+') && pos > st && isDigits(s[st:pos]) {
				pos += 2
				continue
			}
			pos++
		}
		return s[st:pos], st
	}
	for {
		t, at := tok()
		if t == "" {
			return nil, &ParseError{Param: "constraint", Offset: off + at, Msg: "missing term"}
		}
		term := Term{Coef: sign}
		coef, name, hasMul := strings.Cut(t, "*")
		if hasMul {
			c, err := strconv.ParseFloat(coef, 64)
			if err != nil {
				return nil, &ParseError{Param: "constraint", Offset: off + at, Msg: fmt.Sprintf("coefficient %q is not a number", coef)}
			}
			term.Coef *= c
			term.Param = name
		} else if c, err := strconv.ParseFloat(t, 64); err == nil {
			term.Coef *= c
		} else {
			term.Param = t
		}
		if term.Param != "" && !validName(term.Param) {
			return nil, &ParseError{Param: "constraint", Offset: off + at, Msg: fmt.Sprintf("invalid parameter name %q", term.Param)}
		}
		ts = append(ts, term)
		for pos < len(s) && (s[pos] == ' ' || s[pos] == '\t') {
			pos++
		}
		if pos >= len(s) {
			return ts, nil
		}
		switch s[pos] {
		case '+':
			sign = 1
		case '-':
			sign = -1
		default:
			return nil, &ParseError{Param: "constraint", Offset: off + pos, Msg: fmt.Sprintf("unexpected %q", s[pos:])}
		}
		pos++
	}
}

func isDigits(s string) bool {
	for _, r := range s {
		if (r < '0' || r > '9') && r != '.' {
			return false
		}
	}
	return s != ""
}
