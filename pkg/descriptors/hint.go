package descriptors

import (
	"fmt"
	"strings"

	"github.com/dynalimit/dynalimit/pkg/descriptors/suggest"
)

// keysAt are the keys each place of a descriptor file accepts, by the words
// the parser names the place with: an unknown key is suggested the nearest
// of them. TestKeysAtAreKnown keeps them in step with the parser.
var keysAt = []struct {
	where string
	keys  []string
}{
	{"at the top level", []string{"domain", "descriptors", "namespace", "adjustments", "prices"}},
	{"in a descriptor", []string{"key", "value", "rate_limit", "limits", "budget", "descriptors", "metadata",
		"shadow_mode", "quota_mode", "detailed_metric", "value_to_metric", "share_threshold",
		"entity", "resource", "cascade"}},
	{"in rate_limit", append(limitKeys(), "unlimited", "replaces")},
	{"in a replaces entry", []string{"name"}},
	{"in limits entry", append(limitKeys(), "budget")},
	{"in budget", budgetKeys()},
	{"in prices", priceKeys()},
	{"in a price", onePriceKeys()},
	{"in an adjustment's cost", []string{"header", "trailer", "metadata", "input", "output"}},
	{"in a cost's input or output", []string{"header", "trailer", "metadata"}},
	{"in an adjustment's descriptor", []string{"key", "value"}},
	{"in an adjustment", []string{"limit", "descriptor", "cost"}},
	{"in cost metadata", []string{"namespace", "key"}},
}

// limitKeys are the keys rate_limit and a limits entry share (limitField).
func limitKeys() []string {
	return []string{"name", "unit", "requests_per_unit", "unit_multiplier", "burst", "charge"}
}

// didYouMean returns "; did you mean 'KEY'?" when a key accepted where
// (a place of keysAt, perhaps followed by more words) is near key, else "".
func didYouMean(key, where string) string {
	for _, at := range keysAt {
		if strings.HasPrefix(where, at.where) {
			if c := suggest.Closest(key, at.keys); c != "" {
				return fmt.Sprintf("; did you mean '%s'?", c)
			}
			return ""
		}
	}
	return ""
}

// unitList names the units a limit accepts, for the error of one it does
// not.
const unitList = "want one of second, minute, hour, day, week, month, year (any case)"
