package e2e

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/internal/envoytest"
)

// scenarios is how many scenarios a full run (no -run filter) must pass.
const scenarios = 15

func TestMain(m *testing.M) {
	flag.Parse()
	// One DynamoDB Local serves every scenario, a table each: a JVM
	// started per scenario cost seconds, and answered slowly while cold.
	code := dynamotest.Main(m)
	ran, bad := envoytest.Report(os.Stdout, "internal/e2e")
	// A full run must run every scenario; -short skips them all (Envoy).
	if f := flag.Lookup("test.run"); f != nil && f.Value.String() == "" && code == 0 && !testing.Short() {
		if ran != scenarios || bad != 0 {
			fmt.Printf("internal/e2e: a full run must pass all %d scenarios; %d ran, %d did not pass\n", scenarios, ran, bad)
			code = 1
		}
	}
	os.Exit(code)
}
