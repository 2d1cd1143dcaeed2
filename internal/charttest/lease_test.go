package charttest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dynalimit/dynalimit/internal/config"
)

// leaseWant is where a value set's pods must find their lease keys.
type leaseWant struct {
	secret   string        // the Secret holding the keys
	key      string        // its key whose value is the key file
	rendered bool          // the chart renders that Secret
	keys     []string      // the key file's lines; nil for a generated key
	ttl      time.Duration // LEASE_TTL the binary runs with
}

// checkLease: every replica reads its lease keys from one Secret, mounted
// read-only as the file LEASE_SIGNING_KEY_FILE names (not with subPath, so
// that a rotated Secret reaches the running pods), and the key file the
// chart renders loads as the binary's keyring.
func checkLease(t *testing.T, want leaseWant, objs []Object, pod corev1.PodSpec, s config.Settings) {
	t.Helper()
	if s.LeaseSigningKey != "" || s.LeaseSigningKeyPrevious != "" {
		t.Error("LEASE_SIGNING_KEY or LEASE_SIGNING_KEY_PREVIOUS is set: the keys belong in the Secret, not in the pod spec")
	}
	if s.LeaseTTL != want.ttl {
		t.Errorf("LEASE_TTL %s, want %s", s.LeaseTTL, want.ttl)
	}
	dir, file := path.Split(s.LeaseSigningKeyFile)
	if file == "" || !path.IsAbs(dir) {
		t.Fatalf("LEASE_SIGNING_KEY_FILE=%q, want an absolute file path", s.LeaseSigningKeyFile)
	}
	var mount *corev1.VolumeMount
	for i, m := range pod.Containers[0].VolumeMounts {
		if m.MountPath == path.Clean(dir) {
			mount = &pod.Containers[0].VolumeMounts[i]
		}
	}
	if mount == nil {
		t.Fatalf("nothing is mounted at %s, the directory of LEASE_SIGNING_KEY_FILE", dir)
	}
	if !mount.ReadOnly || mount.SubPath != "" || mount.SubPathExpr != "" {
		t.Errorf("lease keys mounted %+v, want read-only and without subPath (a subPath mount never sees a rotated key)", *mount)
	}
	i := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == mount.Name })
	if i < 0 || pod.Volumes[i].Secret == nil {
		t.Fatalf("the volume %s of the lease keys is not a Secret", mount.Name)
	}
	sv := pod.Volumes[i].Secret
	if sv.SecretName != want.secret || len(sv.Items) != 1 || sv.Items[0].Key != want.key || sv.Items[0].Path != file {
		t.Errorf("lease keys volume: Secret %s items %+v, want key %s of %s as %s", sv.SecretName, sv.Items, want.key, want.secret, file)
	}
	if sv.DefaultMode == nil || *sv.DefaultMode != 0o440 {
		t.Errorf("lease keys volume defaultMode %s, want 0440: readable by the pod's group alone", mode(sv.DefaultMode))
	}
	if pod.SecurityContext == nil || pod.SecurityContext.FSGroup == nil {
		t.Error("no fsGroup: the lease keys (mode 0440) are not the pod's group's to read")
	}

	var secrets []*corev1.Secret
	for _, o := range objs {
		if o.Kind == "Secret" {
			secrets = append(secrets, o.Value.(*corev1.Secret))
		}
	}
	if !want.rendered {
		if len(secrets) != 0 {
			t.Errorf("%d Secrets rendered, want none: the keys are in %s, which the user manages", len(secrets), want.secret)
		}
		return
	}
	if len(secrets) != 1 || secrets[0].Name != want.secret {
		t.Fatalf("Secrets %v, want %s alone", secrets, want.secret)
	}
	data, ok := secrets[0].Data[want.key]
	if !ok {
		t.Fatalf("the Secret %s has no key %s", want.secret, want.key)
	}
	keyFile := filepath.Join(t.TempDir(), file)
	if err := os.WriteFile(keyFile, data, 0o400); err != nil {
		t.Fatal(err)
	}
	s.LeaseSigningKeyFile = keyFile
	if _, generated, err := s.LeaseKeyring(); err != nil || generated {
		t.Errorf("the Secret's keys do not load as the binary's keyring: generated %v, %v", generated, err)
	}
	if want.keys != nil && !slices.Equal(strings.Split(string(data), "\n"), want.keys) {
		t.Errorf("key file %q, want the lines %q", data, want.keys)
	}
	if want.keys == nil && !generatedKey.Match(data) {
		t.Errorf("generated key %q, want 64 random letters and digits", data)
	}
}

// mode formats a file mode of the API, nil as "unset".
func mode(m *int32) string {
	if m == nil {
		return "unset"
	}
	return fmt.Sprintf("%#o", *m)
}

// generatedKey is the chart's generated lease key.
var generatedKey = regexp.MustCompile(`^[A-Za-z0-9]{64}$`)

// TestLeaseKeyGenerated: without keys in the values, each install draws its
// own key; none is built into the chart. (helm template cannot look up the
// Secret an install made, so each rendering draws again; TestLeaseKeyKept
// shows an install keeping it.)
func TestLeaseKeyGenerated(t *testing.T) {
	var keys []string
	for range 2 {
		for _, o := range render(t, nil) {
			if sec, ok := o.Value.(*corev1.Secret); ok {
				keys = append(keys, string(sec.Data["keys"]))
			}
		}
	}
	if len(keys) != 2 || !generatedKey.MatchString(keys[0]) || keys[0] == keys[1] {
		t.Fatalf("generated keys %q, want two renderings to draw two random keys", keys)
	}
}

// TestLeaseRefuses: lease values the binary would refuse, or that would put
// the keys in two places, stop helm template with a message naming them.
func TestLeaseRefuses(t *testing.T) {
	key, other := "test-only-signing-key-0123456789abcdef", "test-only-previous-key-0123456789abcdef"
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"short key", []string{"--set", "lease.key=short"}, "lease.key is 5 bytes, want at least 32"},
		{"short previous key", []string{"--set", "lease.key=" + key, "--set", "lease.previousKeys={" + other + ",short}"}, "lease.previousKeys[1] is 5 bytes"},
		{"previous keys without a key", []string{"--set", "lease.previousKeys={" + other + "}"}, "lease.previousKeys is set but lease.key is not"},
		{"a key and an existing Secret", []string{"--set", "lease.existingSecret=mine", "--set", "lease.key=" + key}, "keep the keys in one place"},
		{"two keys in one", []string{"--set-string", "lease.key=" + key + "\n" + other}, "lease.key spans lines"},
		{"a lease setting in extraEnv", []string{"--set", "extraEnv.LEASE_SIGNING_KEY=" + key}, "extraEnv.LEASE_SIGNING_KEY: the chart sets it"},
		{"an empty existingSecretKey", []string{"--set", "lease.existingSecret=mine", "--set", "lease.existingSecretKey="}, "/lease/existingSecretKey': minLength"},
		{"a misspelt lease value", []string{"--set", "lease.existingSecretName=mine"}, "additional properties 'existingSecretName' not allowed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := helm(t, append([]string{"template", "rel", chartDir}, tc.args...)...)
			if err == nil {
				t.Fatalf("helm template %q succeeded; want a refusal", tc.args)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("helm template %q failed without %q: %v", tc.args, tc.want, err)
			}
		})
	}
}

// TestLeaseKeyKept: an install or upgrade keeps the key the chart's Secret
// already holds. helm template --dry-run=server renders as an upgrade does,
// looking the Secret up in the cluster, here a fake API server that serves
// that one Secret; without it (404) a new key is drawn.
func TestLeaseKeyKept(t *testing.T) {
	const kept = "kept-lease-key-0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name   string
		stored *corev1.Secret
	}{
		{"kept", &corev1.Secret{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Name: "rel-dynalimit-lease", Namespace: "ns"},
			Data:       map[string][]byte{"keys": []byte(kept)},
		}},
		{"first install", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := newSecretServer(t, tc.stored)
			out, err := helm(t, "template", "rel", chartDir, "--namespace", "ns", "--dry-run=server", "--kubeconfig", api.kubeconfig(t))
			if err != nil {
				t.Fatal(err)
			}
			objs, err := Decode(out)
			if err != nil {
				t.Fatalf("strict decode of the rendered chart: %v", err)
			}
			var got []string
			for _, o := range objs {
				if sec, ok := o.Value.(*corev1.Secret); ok {
					got = append(got, string(sec.Data["keys"]))
				}
			}
			if want := "/api/v1/namespaces/ns/secrets/rel-dynalimit-lease"; !slices.Contains(api.gets(), want) {
				t.Fatalf("the chart asked the API server for %q, want a lookup of %s", api.gets(), want)
			}
			switch {
			case len(got) != 1:
				t.Fatalf("%d lease Secrets rendered, want 1", len(got))
			case tc.stored != nil && got[0] != kept:
				t.Errorf("lease key %q, want the Secret's own %q kept", got[0], kept)
			case tc.stored == nil && !generatedKey.MatchString(got[0]):
				t.Errorf("lease key %q with no Secret in the cluster, want a generated one", got[0])
			}
		})
	}
}

// secretServer is the part of a Kubernetes API server Helm's lookup of one
// Secret reads: discovery of v1, and that Secret (or 404).
type secretServer struct {
	srv    *httptest.Server
	mu     sync.Mutex
	served []string // paths asked for
}

func newSecretServer(t *testing.T, stored *corev1.Secret) *secretServer {
	t.Helper()
	s := &secretServer{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.served = append(s.served, r.URL.Path)
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/api/v1":
			_ = json.NewEncoder(w).Encode(metav1.APIResourceList{
				TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
				GroupVersion: "v1",
				APIResources: []metav1.APIResource{{Name: "secrets", Namespaced: true, Kind: "Secret", Verbs: metav1.Verbs{"get", "list"}}},
			})
		case r.Method == http.MethodGet && stored != nil && r.URL.Path == "/api/v1/namespaces/"+stored.Namespace+"/secrets/"+stored.Name:
			_ = json.NewEncoder(w).Encode(stored)
		default:
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(metav1.Status{
				TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
				Status:   metav1.StatusFailure, Reason: metav1.StatusReasonNotFound, Code: http.StatusNotFound,
				Message: r.URL.Path + " not found",
			})
		}
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// kubeconfig writes a kubeconfig pointing at the server and returns its path.
func (s *secretServer) kubeconfig(t *testing.T) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: fake, cluster: {server: %q}}]
users: [{name: fake, user: {token: fake}}]
contexts: [{name: fake, context: {cluster: fake, user: fake, namespace: ns}}]
current-context: fake
`, s.srv.URL)
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// gets returns the paths the server was asked for.
func (s *secretServer) gets() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.served)
}
