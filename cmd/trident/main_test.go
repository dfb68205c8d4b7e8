package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
)

// Every verb refuses positional arguments and bad values instead of ignoring them; a flag
// error is marked errUsage (the flag package has printed it, main exits 2 silently) and
// -h is flag.ErrHelp.
func TestVerbsRefuseMisuse(t *testing.T) {
	cmds := commands()
	for _, tc := range []struct {
		verb string
		args []string
		want string // substring of the error; "usage" = errUsage, "help" = flag.ErrHelp
	}{
		{"sim", []string{"extra"}, `unexpected arguments ["extra"]: flags only (see 'trident sim -h')`},
		{"sim", []string{"-bogus"}, "usage"},
		{"sim", []string{"-h"}, "help"},
		{"sim", []string{"-scale", "0"}, "-scale 0: want a positive multiplier"},
		{"sim", []string{"-duration", "-5s"}, "-duration -5s: want 0 (one pass) or a positive duration"},
		{"sim", []string{"-pipeline", "pdfmini"}, `unknown pipeline "pdfmini"`},
		{"demo", []string{"-docs", "-3"}, "-docs -3: want at least 1"},
		{"demo", []string{"-speed", "0"}, "-speed 0: want a positive factor"},
		{"demo", []string{"-pipeline", "pdfmini"}, `pipeline "pdfmini" has no demo job file (want pdf or video)`},
		{"planner", []string{"-scheduler", "x", "-id", "a", "-data-dir", "d"}, `-scheduler="x": want milp, greedy or proportional`},
		{"planner", []string{"-id", "a", "-data-dir", "d", "extra"}, "unexpected arguments"},
		{"bench", []string{"-h"}, "help"},
		{"bench", nil, "usage"},
		{"version", []string{"x"}, "unexpected arguments"},
	} {
		err := cmds[tc.verb].run(context.Background(), tc.args, io.Discard, io.Discard)
		switch tc.want {
		case "usage":
			if !errors.Is(err, errUsage) {
				t.Errorf("%s %q: err %v, want errUsage", tc.verb, tc.args, err)
			}
		case "help":
			if !errors.Is(err, flag.ErrHelp) {
				t.Errorf("%s %q: err %v, want flag.ErrHelp", tc.verb, tc.args, err)
			}
		default:
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s %q: err %v, want %q", tc.verb, tc.args, err, tc.want)
			}
		}
	}
}
