package main

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Annotations holding a numeric flag's least and greatest accepted values.
const (
	flagMinKey = "cann-train/min"
	flagMaxKey = "cann-train/max"
)

// bounded says the named flags of f accept values from lo to hi only ("":
// no bound on that side), each written as the flag writes its values: an
// integer, a float or a duration ("1ns": positive). The root checks every
// bounded flag a command line sets before the command runs
// (checkFlagBounds), so "--steps 0" or "--wait -1s" is an error instead
// of the default, or the "do not wait", a command would fall back to.
// A flag's default is not checked: 0 may stand for "choose for me".
func bounded(f *pflag.FlagSet, lo, hi string, names ...string) {
	for _, n := range names {
		fl := f.Lookup(n)
		if fl == nil {
			panic("bounded: no flag --" + n)
		}
		for _, b := range []struct{ key, v string }{{flagMinKey, lo}, {flagMaxKey, hi}} {
			if b.v == "" {
				continue
			}
			if _, err := parseFlagNumber(fl.Value.Type(), b.v); err != nil {
				panic(fmt.Sprintf("bounded: --%s: %v", n, err))
			}
			_ = f.SetAnnotation(n, b.key, []string{b.v})
		}
	}
}

// atLeast is bounded with no upper bound.
func atLeast(f *pflag.FlagSet, lo string, names ...string) { bounded(f, lo, "", names...) }

// checkFlagBounds checks the bounded flags cmd's command line sets (see
// bounded), saying what each one wants.
func checkFlagBounds(cmd *cobra.Command) error {
	var errs []string
	cmd.Flags().Visit(func(fl *pflag.Flag) {
		lo, hasLo := fl.Annotations[flagMinKey]
		hi, hasHi := fl.Annotations[flagMaxKey]
		if !hasLo && !hasHi {
			return
		}
		t := fl.Value.Type()
		v, err := parseFlagNumber(t, fl.Value.String())
		if err != nil {
			errs = append(errs, fmt.Sprintf("--%s %s: %v", fl.Name, fl.Value, err))
			return
		}
		var least, most float64
		if hasLo {
			least, _ = parseFlagNumber(t, lo[0])
		}
		if hasHi {
			most, _ = parseFlagNumber(t, hi[0])
		}
		if (!hasLo || v >= least) && (!hasHi || v <= most) && !math.IsNaN(v) {
			return
		}
		var want string
		switch {
		case hasLo && hasHi:
			want = fmt.Sprintf("want %s..%s", lo[0], hi[0])
		case t == "duration" && least == 1:
			want = "want a positive duration"
		case least == 0:
			want = "want 0 or more"
		default:
			want = "want at least " + lo[0]
		}
		errs = append(errs, fmt.Sprintf("--%s %s: %s", fl.Name, fl.Value, want))
	})
	if len(errs) == 0 {
		return nil
	}
	return errors.New(strings.Join(errs, "; "))
}

// parseFlagNumber reads a value of a flag of type t (pflag's Type()) as a
// number: durations in nanoseconds.
func parseFlagNumber(t, s string) (float64, error) {
	switch t {
	case "int", "int8", "int16", "int32", "int64":
		n, err := strconv.ParseInt(s, 10, 64)
		return float64(n), err
	case "uint", "uint8", "uint16", "uint32", "uint64":
		n, err := strconv.ParseUint(s, 10, 64)
		return float64(n), err
	case "float32", "float64":
		return strconv.ParseFloat(s, 64)
	case "duration":
		d, err := time.ParseDuration(s)
		return float64(d), err
	}
	return 0, fmt.Errorf("a %s flag has no numeric bounds", t)
}
