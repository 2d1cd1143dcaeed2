package dynamo_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/dynalimit/dynalimit/pkg/dynamo"
)

// TestNewClientLocalCredentials: on a local endpoint the client signs with
// the environment's credentials (keys, then a profile of the shared files)
// and with the access key id "local" only when the environment has none,
// so that it sees the DynamoDB Local database `aws dynamodb --endpoint-url`
// sees; on AWS's endpoint the environment's keys are used as they are.
func TestNewClientLocalCredentials(t *testing.T) {
	dir := t.TempDir()
	creds := filepath.Join(dir, "credentials")
	if err := os.WriteFile(creds, []byte("[default]\naws_access_key_id = fromfile\naws_secret_access_key = s\n\n[dev]\naws_access_key_id = fromprofile\naws_secret_access_key = s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	none := filepath.Join(dir, "none")
	cases := []struct {
		name     string
		endpoint string
		env      map[string]string
		want     string
	}{
		{"nothing set", "http://127.0.0.1:8000", map[string]string{}, dynamo.LocalAccessKeyID},
		{"keys in the environment", "http://127.0.0.1:8000", map[string]string{"AWS_ACCESS_KEY_ID": "AKIDENV", "AWS_SECRET_ACCESS_KEY": "s"}, "AKIDENV"},
		{"default profile of the shared file", "http://localhost:8000", map[string]string{"AWS_SHARED_CREDENTIALS_FILE": creds}, "fromfile"},
		{"AWS_PROFILE", "http://localhost:8000", map[string]string{"AWS_SHARED_CREDENTIALS_FILE": creds, "AWS_PROFILE": "dev"}, "fromprofile"},
		{"keys on AWS's endpoint", "", map[string]string{"AWS_ACCESS_KEY_ID": "AKIDENV", "AWS_SECRET_ACCESS_KEY": "s"}, "AKIDENV"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE",
				"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_EC2_METADATA_DISABLED", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"} {
				t.Setenv(k, "")
				os.Unsetenv(k)
			}
			t.Setenv("AWS_CONFIG_FILE", none)
			t.Setenv("AWS_SHARED_CREDENTIALS_FILE", none)
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			client, err := dynamo.NewClient(context.Background(), c.endpoint, "us-east-1")
			if err != nil {
				t.Fatalf("NewClient(%q) = %v", c.endpoint, err)
			}
			got, err := client.Options().Credentials.Retrieve(context.Background())
			if err != nil || got.AccessKeyID != c.want {
				t.Errorf("NewClient(%q) signs with access key id %q (%v), want %q", c.endpoint, got.AccessKeyID, err, c.want)
			}
		})
	}
}
