package outboxcli

import (
	"flag"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// flagName matches a flag as the flag package spells it in its errors
// ("-retention"); help spells flags "--retention".
var flagName = regexp.MustCompile(`(^|\s)-{1,2}([A-Za-z][\w-]*)`)

// invalidValue is the flag package's error for a value its flag rejects.
var invalidValue = regexp.MustCompile(`^invalid (?:boolean )?value "(.*)" for (?:flag )?-{1,2}([\w-]+): (.*)$`)

// parseErrorMessage rewrites an error of flag.FlagSet.Parse as help would say
// it: flags spelled with "--", and a hint for a duration written in days.
func (o *options) parseErrorMessage(err error) string {
	msg := err.Error()
	if m := invalidValue.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("--%s: invalid value %q: %s%s", m[2], m[1], m[3], o.valueHint(m[2], m[1]))
	}
	if f, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		return "unknown flag --" + strings.TrimLeft(f, "-")
	}
	return flagName.ReplaceAllString(msg, "$1--$2")
}

// dayDuration is a duration flag that also takes days ("7d", "1.5d",
// "7d12h"): retentions and ages are counted in days, which Go durations
// do not have. A day is 24h.
type dayDuration struct{ flag.Value }

var days = regexp.MustCompile(`^(-?)(\d+(?:\.\d+)?)d(.*)$`)

func (d dayDuration) Set(s string) error {
	if m := days.FindStringSubmatch(strings.TrimSpace(s)); m != nil {
		n, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			return err
		}
		total := time.Duration(n * 24 * float64(time.Hour))
		if m[3] != "" {
			rest, err := time.ParseDuration(m[3])
			if err != nil || rest < 0 {
				return fmt.Errorf("time: invalid duration %q", s)
			}
			total += rest
		}
		if m[1] == "-" {
			total = -total
		}
		return d.Value.Set(total.String())
	}
	return d.Value.Set(s)
}

// Get is the duration, as flag.Getter.
func (d dayDuration) Get() any { return d.Value.(flag.Getter).Get() }

// acceptDays makes every duration flag of fs take days as well.
func acceptDays(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		if _, done := f.Value.(dayDuration); done {
			return
		}
		if g, ok := f.Value.(flag.Getter); ok {
			if _, isDuration := g.Get().(time.Duration); isDuration {
				f.Value = dayDuration{f.Value}
			}
		}
	})
}

// valueHint explains a rejected duration: the units it takes.
func (o *options) valueHint(name, _ string) string {
	f := o.fs.Lookup(name)
	if f == nil {
		return ""
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return ""
	}
	if _, isDuration := g.Get().(time.Duration); !isDuration {
		return ""
	}
	return " (want a duration such as 90s, 15m, 168h or 7d)"
}
