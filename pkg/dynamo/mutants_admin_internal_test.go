package dynamo

import (
	"testing"
)

// TestRequestForm: %XX sequences are decoded where well formed (a 0 digit
// in either place too) and escaped again; a % too near the end stays a
// byte.
func TestRequestForm(t *testing.T) {
	for _, c := range []struct {
		id, want string
		ok       bool
	}{
		{"%0A", "%0A", true},
		{"%30", "0", false},
		{"a%4", "a%254", false},
		{"org/team", "org%2Fteam", false},
	} {
		if got, ok := RequestForm(c.id); got != c.want || ok != c.ok {
			t.Errorf("requestForm(%q) = %q, %t, want %q, %t", c.id, got, ok, c.want, c.ok)
		}
	}
}
