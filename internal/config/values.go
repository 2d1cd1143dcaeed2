package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The flag.Value types below bind a variable to a Settings field. Set parses
// the environment's or the command line's spelling; String prints the value
// in the same spelling, which Table uses for defaults.

type stringValue string

func (v *stringValue) Set(s string) error { *v = stringValue(s); return nil }
func (v *stringValue) String() string {
	if v == nil {
		return ""
	}
	return string(*v)
}

// secretValue holds a secret (a signing key): String never prints it, so
// neither flag help nor the settings table shows the value set.
type secretValue string

func (v *secretValue) Set(s string) error { *v = secretValue(s); return nil }
func (v *secretValue) String() string     { return "" }

type intValue int

func (v *intValue) Set(s string) error {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, strconv.IntSize)
	if err != nil {
		return errors.New("not an integer")
	}
	*v = intValue(n)
	return nil
}

func (v *intValue) String() string {
	if v == nil {
		return "0"
	}
	return strconv.Itoa(int(*v))
}

type boolValue bool

func (v *boolValue) Set(s string) error {
	b, err := strconv.ParseBool(strings.TrimSpace(s))
	if err != nil {
		return errors.New("not a boolean (true or false)")
	}
	*v = boolValue(b)
	return nil
}

func (v *boolValue) String() string {
	if v == nil {
		return "false"
	}
	return strconv.FormatBool(bool(*v))
}

// IsBoolFlag lets -shadow_mode stand for -shadow_mode=true.
func (v *boolValue) IsBoolFlag() bool { return true }

type floatValue float64

func (v *floatValue) Set(s string) error {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return errors.New("not a number")
	}
	*v = floatValue(f)
	return nil
}

func (v *floatValue) String() string {
	if v == nil {
		return "0"
	}
	return strconv.FormatFloat(float64(*v), 'g', -1, 64)
}

type durationValue time.Duration

func (v *durationValue) Set(s string) error {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return errors.New("not a duration (e.g. 15ms, 10s, 1h)")
	}
	*v = durationValue(d)
	return nil
}

func (v *durationValue) String() string {
	if v == nil {
		return "0s"
	}
	return time.Duration(*v).String()
}

// enumValue accepts one of allowed, in any case, and stores it lower-cased.
type enumValue struct {
	p       *string
	allowed []string
}

func (v *enumValue) Set(s string) error {
	s = strings.ToLower(strings.TrimSpace(s))
	for _, a := range v.allowed {
		if s == a {
			*v.p = s
			return nil
		}
	}
	return fmt.Errorf("want one of %s", strings.Join(v.allowed, ", "))
}

func (v *enumValue) String() string {
	if v == nil || v.p == nil {
		return ""
	}
	return *v.p
}

// tagsValue holds key:value,key2:value2, as envconfig reads
// envoyproxy/ratelimit's map settings (EXTRA_TAGS). Set checks the form and
// stores it as given; parseTags reads it.
type tagsValue string

func (v *tagsValue) Set(s string) error {
	if _, err := parseTags(s); err != nil {
		return err
	}
	*v = tagsValue(s)
	return nil
}

func (v *tagsValue) String() string {
	if v == nil {
		return ""
	}
	return string(*v)
}

func parseTags(s string) (map[string]string, error) {
	m := map[string]string{}
	for _, pair := range strings.Split(s, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		k, val, ok := strings.Cut(pair, ":")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not key:value", pair)
		}
		m[k] = val
	}
	return m, nil
}
