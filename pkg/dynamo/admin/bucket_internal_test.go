package admin

import "testing"

// TestLimitName undoes a limit attribute's escape, and keeps what does not
// unescape as it is.
func TestLimitName(t *testing.T) {
	for in, want := range map[string]string{"b_rps": "rps", "b_a%2Fb": "a/b", "b_%zz": "%zz"} {
		if got := limitName(in); got != want {
			t.Errorf("limitName(%q) = %q, want %q", in, got, want)
		}
	}
}
