package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
	"github.com/dynalimit/dynalimit/internal/testutil"
)

// TestAdminCommandsIdempotent runs every admin command through the built
// binary in a shell, against DynamoDB Local with DYNAMODB_ENDPOINT set and
// every other setting at its default (the table is serve's default,
// dynalimit), and checks each command's output, stderr and exit status,
// deletes of what is not stored and a missing table included. Run twice on
// one DynamoDB Local, it answers the same: every command is idempotent. (The
// README's own block is run as written by internal/walkthrough.)
func TestAdminCommandsIdempotent(t *testing.T) {
	local := dynamotest.Shared(t)
	bin := testutil.Binary(t)
	env := []string{"PATH=" + filepath.Dir(bin) + string(os.PathListSeparator) + os.Getenv("PATH")}
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "PATH", "DYNAMODB_TABLE", "DYNAMODB_ENDPOINT", "AWS_REGION", "NAMESPACE", "BACKEND_TIMEOUT":
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "DYNAMODB_ENDPOINT="+local.Endpoint())

	id := `[0-9a-f]{12}`
	steps := []struct {
		line   string
		code   int
		stdout string // a regular expression matching all of stdout
		stderr string // likewise
	}{
		{"ratelimit limits get -system -dynamodb_table readme-missing", 1, ``,
			regexp.QuoteMeta("ratelimit limits get: table readme-missing does not exist in us-east-1 at "+local.Endpoint()+": create it with 'ratelimit table create', or check DYNAMODB_TABLE") + "\n"},
		{"ratelimit table create", 0, regexp.QuoteMeta("table dynalimit is ready (schema 2)") + "\n", ``},
		{"ratelimit limits set -entity 'generic_key=demo' -resource example default:5/min", 0,
			regexp.QuoteMeta(`entity "generic_key=demo" resource "example": set default:5/min`) + "\n", ``},
		{"ratelimit limits get -entity 'generic_key=demo' -resource example", 0,
			regexp.QuoteMeta(`entity "generic_key=demo" resource "example": default:5/min`) + "\n", ``},
		{"ratelimit limits set -system rpm:1000/min:1500", 0, regexp.QuoteMeta(`system: set rpm:1000/min:1500`) + "\n", ``},
		{"ratelimit limits delete -resource example", 0, regexp.QuoteMeta(`resource "example": no limits stored, nothing to delete`) + "\n", ``},
		{"ratelimit entity create acme -cascade", 0, regexp.QuoteMeta(`entity "acme" parent "" cascade true`) + "\n", ``},
		{"ratelimit entity create key-1 -parent acme", 0, regexp.QuoteMeta(`entity "key-1" parent "acme" cascade false`) + "\n", ``},
		{"ratelimit limits set -entity acme rpm:2/min", 0, regexp.QuoteMeta(`entity "acme": set rpm:2/min`) + "\n", ``},
		{"ratelimit entity show acme", 0, regexp.QuoteMeta(`entity "acme" parent "" cascade true`+"\n"+`child "key-1"`+"\n"+`chain "acme"`+"\n"+
			`level "acme" cascade true default: rpm:2/min`) + "\n", ``},
		{"ratelimit entity show key-1 -resource example", 0, regexp.QuoteMeta(`entity "key-1" parent "acme" cascade false`+"\n"+`chain "key-1" -> "acme"`+"\n"+
			`level "key-1" cascade false: no limits stored`+"\n"+`level "acme" cascade true default: rpm:2/min`+"\n"+
			`bucket "acme" resource "example": rpm 2 of 2 left`) + "\n", ``},
		{"ratelimit entity create acme -parent key-1", 1, ``,
			regexp.QuoteMeta(`ratelimit entity create: entity "acme": parent "key-1" would make a cycle (acme -> key-1 -> acme): choose a parent that is not "acme" or below it, or change the parent of an entity in the cycle first`) + "\n"},
		{"ratelimit entity create org/team", 1, ``,
			regexp.QuoteMeta(`ratelimit entity create: entity id "org/team": requests name entities by their values escaped ('/', '#', '=', '&', '%', '~', control bytes and invalid UTF-8 as %XX), and no value escapes to this: use "org%2Fteam"`) + "\n"},
		{"ratelimit namespace register team-a", 0, `namespace team-a id ` + id + "\n", ``},
		{"ratelimit namespace list", 0, `team-a\t` + id + "\n", ``},
	}
	for _, st := range steps {
		cmd := exec.Command("/bin/sh", "-c", st.line)
		cmd.Env = env
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatalf("%s: %v", st.line, err)
		}
		t.Logf("$ %s\n%s%s[exit %d]", st.line, out.String(), errOut.String(), code)
		if code != st.code ||
			!regexp.MustCompile(`\A`+st.stdout+`\z`).MatchString(out.String()) ||
			!regexp.MustCompile(`\A`+st.stderr+`\z`).MatchString(errOut.String()) {
			t.Errorf("%s = exit %d, stdout %q, stderr %q; want exit %d, stdout /%s/, stderr /%s/",
				st.line, code, out.String(), errOut.String(), st.code, st.stdout, st.stderr)
		}
	}
}

// TestServeMissingTable: serve on DynamoDB with a table that does not exist
// stops at start with the message that says how to create it.
func TestServeMissingTable(t *testing.T) {
	local := dynamotest.Shared(t)
	dir := t.TempDir()
	writeConfig(t, dir, "e2e.yaml", e2eConfig)
	table := dynamotest.TableName(t) + "-missing"
	env := map[string]string{
		"BACKEND_TYPE": "dynamodb", "DYNAMODB_ENDPOINT": local.Endpoint(), "DYNAMODB_TABLE": table,
		"GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0", "HOST": "127.0.0.1", "PORT": "0", "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0",
	}
	code, _, errOut := runMain(t, env, "serve", "-config_dir", dir)
	want := "table " + table + " does not exist in us-east-1 at " + local.Endpoint() + ": create it with 'ratelimit table create', or check DYNAMODB_TABLE"
	if code != 1 || !strings.Contains(errOut, want) {
		t.Errorf("serve on a missing table = exit %d,\n%s\nwant exit 1 and %q", code, errOut, want)
	}
}

// TestAdminWithoutCredentials: on AWS (no DYNAMODB_ENDPOINT) with no
// credentials anywhere, an admin command says which settings provide them.
// The binary runs with an environment of its own: the SDK reads the
// process's.
func TestAdminWithoutCredentials(t *testing.T) {
	bin := testutil.Binary(t)
	home := t.TempDir()
	cmd := exec.Command(bin, "namespace", "list")
	cmd.Env = []string{"HOME=" + home, "AWS_EC2_METADATA_DISABLED=true", "AWS_CONFIG_FILE=" + filepath.Join(home, "none"), "AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(home, "none")}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	want := "ratelimit namespace list: no AWS credentials to call DynamoDB in us-east-1 at AWS's endpoint: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or a role; or DYNAMODB_ENDPOINT for DynamoDB Local\n"
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || errOut.String() != want {
		t.Errorf("namespace list without credentials = %v, stderr %q, want exit 1 and %q", err, errOut.String(), want)
	}
}
