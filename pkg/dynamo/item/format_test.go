package item

import (
	"strings"
	"testing"
)

// The tests in this file pin what the package writes to a table: the
// escaped key components and the update expressions.
//
// Equivalent mutants, read by internal/mutants (make mutation):
//
// mutant: CONDITIONALS_BOUNDARY codec.go `n >= 1` decode: a stored shard count of 1 is skipped, but the image starts at shardCount 1.

// TestEsc pins the escaped form of a key component, which is stored in
// every key of a table (and read by the namespace-scoped IAM conditions):
// each end of the kept ranges stays, each byte just outside one is escaped,
// and a component whose escaped form passes maxComponent bytes is hashed.
func TestEsc(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"kept ends", "azAZ09._-", "azAZ09._-"},
		{"just outside the lowercase letters", "`{", "%60%7B"},
		{"just outside the capitals", "@[", "%40%5B"},
		{"just outside the digits", "/:", "%2F%3A"},
		{"separators and the escape itself", "#%~ ", "%23%25%7E%20"},
		{"a byte past ASCII", "\xe9", "%E9"},
		{"empty", "", ""},
		{"exactly maxComponent bytes escaped", strings.Repeat("%", MaxComponent/3) + "a", strings.Repeat("%25", MaxComponent/3) + "a"},
		{"one byte more is hashed", strings.Repeat("a", MaxComponent+1), "~" + "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Esc(tt.in); got != tt.want {
				t.Errorf("esc(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// TestExprUpdate: an update expression has a SET clause only when it sets
// something and an ADD clause only when it adds something (DynamoDB refuses
// an empty clause), and none at all when it does neither.
func TestExprUpdate(t *testing.T) {
	tests := []struct {
		name  string
		build func(e *Expr)
		want  string // "" for no expression
	}{
		{"nothing", func(*Expr) {}, ""},
		{"set only", func(e *Expr) { e.SetAttr("x", NumAV(1)) }, "SET #a0 = :v0"},
		{"add only", func(e *Expr) { e.AddNum("x", 1) }, "ADD #a0 :v0"},
		{"both", func(e *Expr) { e.SetAttr("x", NumAV(1)); e.AddNum("y", 2); e.AddNum("x", 3) }, "SET #a0 = :v0 ADD #a1 :v1, #a0 :v2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := NewExpr()
			tt.build(e)
			got := ""
			if u := e.Update(); u != nil {
				got = *u
			}
			if got != tt.want {
				t.Errorf("update() = %q, want %q", got, tt.want)
			}
		})
	}
}
