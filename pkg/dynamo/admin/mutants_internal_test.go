package admin

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
)

// TestEntityString: no record is the empty string.
func TestEntityString(t *testing.T) {
	if got := entityString(dynamo.Entity{}); got != "" {
		t.Errorf("entityString(none) = %q, want empty", got)
	}
	if got := entityString(dynamo.Entity{ID: "a", Parent: "b"}); got != `id="a" parent="b" cascade=false` {
		t.Errorf("entityString(a) = %q", got)
	}
}

// TestNamespaceOfAndName: a registry record without a change time has none;
// one with it, that instant; a key prefix names its namespace unescaped, or
// as it is when it does not unescape.
func TestNamespaceOfAndName(t *testing.T) {
	if ns := namespaceOf(map[string]types.AttributeValue{"name": item.StrAV("a")}); !ns.Changed.IsZero() || ns.State != NamespaceActive {
		t.Errorf("namespaceOf(no change) = %+v, want active and no change time", ns)
	}
	if ns := namespaceOf(map[string]types.AttributeValue{"name": item.StrAV("a"), attrChangedAt: item.NumAV(1234)}); !ns.Changed.Equal(time.UnixMilli(1234)) {
		t.Errorf("namespaceOf(changed at 1234) = %+v", ns)
	}
	for in, want := range map[string]string{"nteam%2Fa": "team/a", "n%zz": "%zz", "nplain": "plain"} {
		if got := namespaceName(in); got != want {
			t.Errorf("namespaceName(%q) = %q, want %q", in, got, want)
		}
	}
}
