package suggest_test

import (
	"testing"

	"github.com/dynalimit/dynalimit/pkg/descriptors/suggest"
)

func TestClosest(t *testing.T) {
	cands := []string{"table", "namespace", "limits", "entity", "check-config"}
	tests := []struct{ word, want string }{
		{"limitz", "limits"}, {"limit", "limits"}, {"entiy", "entity"}, {"tabel", "table"},
		{"check", "check-config"}, {"namespaces", "namespace"}, {"x", ""}, {"serve", ""},
	}
	for _, tt := range tests {
		if got := suggest.Closest(tt.word, cands); got != tt.want {
			t.Errorf("Closest(%q) = %q, want %q", tt.word, got, tt.want)
		}
	}
}

// TestClosestKeys: the descriptor files' typos find their key.
func TestClosestKeys(t *testing.T) {
	keys := []string{"key", "value", "rate_limit", "limits", "descriptors", "shadow_mode", "requests_per_unit", "unit"}
	tests := []struct{ word, want string }{
		{"rate_limt", "rate_limit"}, {"ratelimit", "rate_limit"}, {"valeu", "value"},
		{"requestsperunit", "requests_per_unit"}, {"descriptor", "descriptors"}, {"shadowmode", "shadow_mode"},
		{"zzz", ""},
	}
	for _, tt := range tests {
		if got := suggest.Closest(tt.word, keys); got != tt.want {
			t.Errorf("Closest(%q) = %q, want %q", tt.word, got, tt.want)
		}
	}
}
