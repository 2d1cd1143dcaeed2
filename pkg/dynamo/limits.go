package dynamo

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Scope names where stored limits apply. Exactly one form is valid:
// System; Resource alone; Entity alone (the entity's default for every
// resource); Entity and Resource. Resolution for a debit takes the first
// scope that stores a limit of the debit's name: entity+resource, entity
// default, resource, system, and finally the plan's own (YAML) limit.
type Scope struct {
	// Namespace is the scope's namespace; empty is the store's
	// (Config.Namespace).
	Namespace string
	System    bool
	Entity    string
	Resource  string
}

func (sc Scope) Validate() error {
	switch {
	case sc.System && (sc.Entity != "" || sc.Resource != ""):
		return errors.New("dynamo: scope: system scope takes no entity or resource")
	case !sc.System && sc.Entity == "" && sc.Resource == "":
		return errors.New("dynamo: scope: name the system, a resource, an entity, or an entity and a resource")
	}
	return nil
}

// Key returns the config record's key in namespace ns.
func (sc Scope) Key(ns string) (pk, sk string) {
	switch {
	case sc.System:
		return item.SystemPK(ns), item.SKConfig
	case sc.Entity != "" && sc.Resource != "":
		return item.EntityPK(ns, sc.Entity), item.EntityConfigSK(sc.Resource)
	case sc.Entity != "":
		return item.EntityPK(ns, sc.Entity), item.EntityDefaultSK
	default:
		return item.ResourcePK(ns, sc.Resource), item.SKConfig
	}
}

// String names the scope for logs and audit records.
func (sc Scope) String() string {
	switch {
	case sc.System:
		return "system"
	case sc.Entity != "" && sc.Resource != "":
		return "entity " + strconv.Quote(sc.Entity) + " resource " + strconv.Quote(sc.Resource)
	case sc.Entity != "":
		return "entity " + strconv.Quote(sc.Entity)
	default:
		return "resource " + strconv.Quote(sc.Resource)
	}
}

func DecodeLimits(it map[string]types.AttributeValue) map[string]tokenbucket.Limit {
	m, ok := it[AttrLimits].(*types.AttributeValueMemberM)
	if !ok {
		return nil
	}
	out := map[string]tokenbucket.Limit{}
	for name, av := range m.Value {
		lm, ok := av.(*types.AttributeValueMemberM)
		if !ok {
			continue
		}
		l, err := tokenbucket.NewLimit(
			tokenbucket.Millitokens(item.GetN(lm.Value, "cp")),
			tokenbucket.Millitokens(item.GetN(lm.Value, "ra")),
			time.Duration(item.GetN(lm.Value, "rp"))*time.Millisecond)
		if err == nil {
			out[name] = l
		}
	}
	return out
}

func EncodeLimits(m map[string]tokenbucket.Limit) types.AttributeValue {
	out := map[string]types.AttributeValue{}
	for name, l := range m {
		out[name] = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			"cp": item.NumAV(int64(l.Capacity)), "ra": item.NumAV(int64(l.RefillAmount)), "rp": item.NumAV(l.RefillPeriod.Milliseconds()),
		}}
	}
	return &types.AttributeValueMemberM{Value: out}
}

// ParseLimit parses "name:rate[/sec|/min|/hour|/day][:burst]" (rate per
// second when the unit is omitted): e.g. "rpm:100/min", "tpm:50000/min:80000".
func ParseLimit(spec string) (string, tokenbucket.Limit, error) {
	parts := strings.Split(spec, ":")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" {
		return "", tokenbucket.Limit{}, fmt.Errorf("dynamo: limit %q: want name:rate[/sec|/min|/hour|/day][:burst]", spec)
	}
	rate, unit, _ := strings.Cut(parts[1], "/")
	period := time.Second
	switch unit {
	case "", "s", "sec", "second":
	case "m", "min", "minute":
		period = time.Minute
	case "h", "hour":
		period = time.Hour
	case "d", "day":
		period = 24 * time.Hour
	default:
		return "", tokenbucket.Limit{}, fmt.Errorf("dynamo: limit %q: unknown unit %q (sec, min, hour, day)", spec, unit)
	}
	n, err := strconv.ParseUint(rate, 10, 64)
	if err != nil {
		return "", tokenbucket.Limit{}, fmt.Errorf("dynamo: limit %q: rate: %w", spec, err)
	}
	var burst uint64
	if len(parts) == 3 {
		if burst, err = strconv.ParseUint(parts[2], 10, 64); err != nil {
			return "", tokenbucket.Limit{}, fmt.Errorf("dynamo: limit %q: burst: %w", spec, err)
		}
	}
	l, err := tokenbucket.Rate(n, period, burst)
	if err != nil {
		return "", tokenbucket.Limit{}, fmt.Errorf("dynamo: limit %q: %w", spec, err)
	}
	return parts[0], l, nil
}

// FormatLimit renders a limit in ParseLimit's syntax when it has one (whole
// tokens, period of a second, minute, hour or day), else as
// name:capacity=…,refill=…/period in millitokens.
func FormatLimit(name string, l tokenbucket.Limit) string {
	units := map[time.Duration]string{time.Second: "sec", time.Minute: "min", time.Hour: "hour", 24 * time.Hour: "day"}
	u, ok := units[l.RefillPeriod]
	if ok && l.RefillAmount%tokenbucket.PerToken == 0 && l.Capacity%tokenbucket.PerToken == 0 {
		s := fmt.Sprintf("%s:%d/%s", name, l.RefillAmount/tokenbucket.PerToken, u)
		if l.Capacity != l.RefillAmount {
			s += fmt.Sprintf(":%d", l.Capacity/tokenbucket.PerToken)
		}
		return s
	}
	return fmt.Sprintf("%s:capacity=%dmt,refill=%dmt/%v", name, l.Capacity, l.RefillAmount, l.RefillPeriod)
}

// FormatLimits renders limits sorted by name, space separated.
func FormatLimits(m map[string]tokenbucket.Limit) string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = FormatLimit(n, m[n])
	}
	return strings.Join(out, " ")
}
