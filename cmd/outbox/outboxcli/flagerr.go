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

// days matches a duration written in days, which Go durations do not have.
var days = regexp.MustCompile(`^(\d+(?:\.\d+)?)d$`)

// valueHint explains a rejected duration written in days ("7d"): Go
// durations stop at hours, so it suggests the same span in hours.
func (o *options) valueHint(name, value string) string {
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
	if m := days.FindStringSubmatch(strings.TrimSpace(value)); m != nil {
		n, _ := strconv.ParseFloat(m[1], 64)
		return fmt.Sprintf(" (durations are Go durations, which have no d unit: %s days is %sh)", m[1], strconv.FormatFloat(n*24, 'f', -1, 64))
	}
	return " (want a Go duration such as 90s, 15m or 168h)"
}
