package charttest

import (
	"maps"
	"path"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/dynalimit/dynalimit/internal/config"
)

// redisSettings are envoyproxy/ratelimit's Redis settings, under the names
// the binary reads them with backend redis: the only REDIS_* names the
// chart may render (not REDIS_PIPELINE_LIMIT, which the binary ignores).
var redisSettings = []string{
	"REDIS_SOCKET_TYPE", "REDIS_TYPE", "REDIS_URL", "REDIS_AUTH", "REDIS_SENTINEL_AUTH",
	"REDIS_TLS", "REDIS_TLS_CACERT", "REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY",
	"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "REDIS_POOL_SIZE", "REDIS_PIPELINE_WINDOW", "REDIS_TIMEOUT", "REDIS_PERSECOND", "REDIS_PERSECOND_SOCKET_TYPE",
	"REDIS_PERSECOND_TYPE", "REDIS_PERSECOND_URL", "REDIS_PERSECOND_AUTH",
	"REDIS_PERSECOND_SENTINEL_AUTH", "REDIS_PERSECOND_TLS", "REDIS_PERSECOND_POOL_SIZE",
	"REDIS_PERSECOND_PIPELINE_WINDOW",
	"REDIS_PERSECOND_TIMEOUT",
}

// secretRef is how a wanted environment variable from a Secret is
// written: secretRef(name, key).
func secretRef(name, key string) string { return "secret:" + name + "/" + key }

const (
	testCA   = "-----BEGIN CERTIFICATE-----\ntest-only-ca\n-----END CERTIFICATE-----\n"
	testCert = "-----BEGIN CERTIFICATE-----\ntest-only-client-certificate\n-----END CERTIFICATE-----\n"
	testKey  = "-----BEGIN PRIVATE KEY-----\ntest-only-client-key\n-----END PRIVATE KEY-----\n"
)

// redisCases are the chart rendered on the Redis store.
var redisCases = []struct {
	name string
	args []string
	// env is the Redis part of the container's environment: value, or
	// secretRef for one read from a Secret.
	env map[string]string
	// secret is the data of the Secret <fullname>-redis; nil when the
	// chart must create none.
	secret map[string]string
	// tls maps the files mounted at /etc/dynalimit/redis-tls to the
	// Secret and key they come from.
	tls map[string]string
	// secrets are values that must not appear in the Deployment.
	secrets  []string
	replicas int32
}{
	{
		name: "no auth",
		args: []string{"--set", "backend=redis", "--set", "redis.url=redis.cache.svc:6379"},
		env: map[string]string{
			"REDIS_URL": "redis.cache.svc:6379", "REDIS_TYPE": "single", "REDIS_SOCKET_TYPE": "tcp",
		},
		replicas: 2,
	},
	{
		name: "password from a set value",
		args: []string{"--set", "backend=redis", "--set", "redis.url=redis://redis.cache.svc:6379/0",
			"--set", "redis.auth.password=test-only-set-password"},
		env: map[string]string{
			"REDIS_URL": "redis://redis.cache.svc:6379/0", "REDIS_TYPE": "single", "REDIS_SOCKET_TYPE": "tcp",
			"REDIS_AUTH": secretRef("rel-dynalimit-redis", "password"),
		},
		secret:   map[string]string{"password": "test-only-set-password"},
		secrets:  []string{"test-only-set-password"},
		replicas: 2,
	},
	{
		name: "password, TLS and per-second in the chart's Secret",
		args: []string{"-f", "internal/charttest/testdata/redis-values.yaml"},
		env: map[string]string{
			"REDIS_URL": "rediss://redis.cache.svc:6380", "REDIS_TYPE": "single", "REDIS_SOCKET_TYPE": "tcp",
			"REDIS_TIMEOUT": "50ms", "REDIS_POOL_SIZE": "64", "REDIS_PIPELINE_WINDOW": "150us",
			"REDIS_AUTH": secretRef("rel-dynalimit-redis", "password"),
			"REDIS_TLS":  "true", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true",
			"REDIS_TLS_CACERT":      "/etc/dynalimit/redis-tls/ca.crt",
			"REDIS_TLS_CLIENT_CERT": "/etc/dynalimit/redis-tls/tls.crt",
			"REDIS_TLS_CLIENT_KEY":  "/etc/dynalimit/redis-tls/tls.key",
			"REDIS_PERSECOND":       "true",
			"REDIS_PERSECOND_URL":   "redis-persecond-0.cache.svc:6379,redis-persecond-1.cache.svc:6379",
			"REDIS_PERSECOND_TYPE":  "cluster", "REDIS_PERSECOND_SOCKET_TYPE": "tcp", "REDIS_PERSECOND_TLS": "true",
			"REDIS_PERSECOND_TIMEOUT": "20ms", "REDIS_PERSECOND_POOL_SIZE": "16",
			"REDIS_PERSECOND_AUTH": secretRef("rel-dynalimit-redis", "persecond-password"),
		},
		secret: map[string]string{
			"password": "test-only-redis-password", "persecond-password": "test-only-persecond-password",
			"ca.crt": testCA, "tls.crt": testCert, "tls.key": testKey,
		},
		tls: map[string]string{
			"ca.crt": "rel-dynalimit-redis/ca.crt", "tls.crt": "rel-dynalimit-redis/tls.crt", "tls.key": "rel-dynalimit-redis/tls.key",
		},
		secrets:  []string{"test-only-redis-password", "test-only-persecond-password", "test-only-client-key"},
		replicas: 3,
	},
	{
		name: "sentinels, passwords and TLS from existing Secrets",
		args: []string{"-f", "internal/charttest/testdata/redis-existing-values.yaml"},
		env: map[string]string{
			"REDIS_URL":  "mymaster,sentinel-0.cache.svc:26379,sentinel-1.cache.svc:26379",
			"REDIS_TYPE": "sentinel", "REDIS_SOCKET_TYPE": "tcp",
			"REDIS_AUTH":            secretRef("redis-credentials", "redis-password"),
			"REDIS_SENTINEL_AUTH":   secretRef("redis-credentials", "sentinel-password"),
			"REDIS_TLS":             "true",
			"REDIS_TLS_CACERT":      "/etc/dynalimit/redis-tls/ca.crt",
			"REDIS_TLS_CLIENT_CERT": "/etc/dynalimit/redis-tls/tls.crt",
			"REDIS_TLS_CLIENT_KEY":  "/etc/dynalimit/redis-tls/tls.key",
		},
		tls: map[string]string{
			"ca.crt": "redis-client-tls/ca.crt", "tls.crt": "redis-client-tls/tls.crt", "tls.key": "redis-client-tls/tls.key",
		},
		replicas: 2,
	},
}

// TestRedisLint: helm lint --strict passes on the Redis store's values.
func TestRedisLint(t *testing.T) {
	for _, tc := range redisCases {
		t.Run(tc.name, func(t *testing.T) {
			if out, err := helm(t, append([]string{"lint", "--strict", chartDir}, tc.args...)...); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
}

// TestRedisBackend: with backend redis the Deployment sets BACKEND_TYPE
// redis and envoyproxy/ratelimit's REDIS_* settings under their names,
// reads every password from a Secret (never a value in the Deployment),
// mounts the TLS files where REDIS_TLS_* point, and keeps several
// replicas, as the store is shared.
func TestRedisBackend(t *testing.T) {
	for _, tc := range redisCases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := helm(t, append([]string{"template", "rel", chartDir, "--namespace", "ns"}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			objs, err := Decode(out)
			if err != nil {
				t.Fatalf("strict decode of the rendered chart: %v", err)
			}
			var dep *appsv1.Deployment
			secrets := map[string]*corev1.Secret{}
			for _, o := range objs {
				switch v := o.Value.(type) {
				case *appsv1.Deployment:
					dep = v
				case *corev1.Secret:
					secrets[v.Name] = v
				}
			}
			if dep == nil {
				t.Fatal("no Deployment")
			}
			if r := dep.Spec.Replicas; r == nil || *r != tc.replicas {
				t.Errorf("replicas %v, want %d: the Redis store is shared", r, tc.replicas)
			}
			pod := dep.Spec.Template.Spec
			env := redisEnv(t, pod.Containers[0].Env)
			if env["BACKEND_TYPE"] != "redis" {
				t.Errorf("BACKEND_TYPE %q, want redis", env["BACKEND_TYPE"])
			}
			got := maps.Clone(env)
			maps.DeleteFunc(got, func(k, _ string) bool { return !strings.HasPrefix(k, "REDIS_") })
			if !maps.Equal(got, tc.env) {
				t.Errorf("Redis environment\n got %v\nwant %v", got, tc.env)
			}
			checkRedisSecret(t, secrets["rel-dynalimit-redis"], tc.secret)
			checkRedisRefs(t, pod.Containers[0].Env, secrets)
			checkRedisTLS(t, pod, secrets, tc.tls)
			for _, s := range tc.secrets {
				if strings.Contains(deploymentText(out), s) {
					t.Errorf("the Deployment holds the secret %q as plain text", s)
				}
			}
		})
	}
}

// redisEnv returns the container's environment as a map, values from a
// Secret written as secretRef, failing t on a name that is neither a
// setting of the binary nor one of redisSettings, and on a name set twice.
func redisEnv(t *testing.T, vars []corev1.EnvVar) map[string]string {
	t.Helper()
	known := map[string]bool{}
	for _, v := range config.Table() {
		known[v.Name] = true
	}
	for _, n := range redisSettings {
		known[n] = true
	}
	env := map[string]string{}
	for _, e := range vars {
		if !known[e.Name] {
			t.Errorf("env %s is neither a setting of the binary nor one of envoyproxy/ratelimit's Redis settings", e.Name)
		}
		if _, dup := env[e.Name]; dup {
			t.Errorf("env %s is set twice", e.Name)
		}
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			env[e.Name] = secretRef(e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key)
		default:
			t.Errorf("env %s comes from %+v, want a Secret", e.Name, e.ValueFrom)
		}
	}
	return env
}

// checkRedisSecret compares the Secret <fullname>-redis with the data
// wanted (nil: no Secret).
func checkRedisSecret(t *testing.T, s *corev1.Secret, want map[string]string) {
	t.Helper()
	if want == nil {
		if s != nil {
			t.Errorf("the chart renders the Secret %s with keys %v; want none", s.Name, slices.Sorted(maps.Keys(s.Data)))
		}
		return
	}
	if s == nil {
		t.Fatal("no Secret rel-dynalimit-redis")
	}
	got := map[string]string{}
	for k, v := range s.Data {
		got[k] = string(v)
	}
	if !maps.Equal(got, want) {
		t.Errorf("Secret %s data\n got %q\nwant %q", s.Name, got, want)
	}
}

// checkRedisRefs: a secretKeyRef to a Secret the chart renders names a key
// it holds.
func checkRedisRefs(t *testing.T, vars []corev1.EnvVar, secrets map[string]*corev1.Secret) {
	t.Helper()
	for _, e := range vars {
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			continue
		}
		ref := e.ValueFrom.SecretKeyRef
		if s, ok := secrets[ref.Name]; ok {
			if _, ok := s.Data[ref.Key]; !ok {
				t.Errorf("env %s reads key %q of the Secret %s, which has keys %v", e.Name, ref.Key, ref.Name, slices.Sorted(maps.Keys(s.Data)))
			}
		}
		if ref.Optional != nil && *ref.Optional {
			t.Errorf("env %s: an optional secretKeyRef would start the pods without the password", e.Name)
		}
	}
}

// checkRedisTLS: the files REDIS_TLS_* name are mounted from the Secrets
// and keys wanted (file name to "secret/key"), read-only, and present in a
// Secret the chart renders.
func checkRedisTLS(t *testing.T, pod corev1.PodSpec, secrets map[string]*corev1.Secret, want map[string]string) {
	t.Helper()
	got := map[string]string{}
	var mount *corev1.VolumeMount
	for i, m := range pod.Containers[0].VolumeMounts {
		if m.Name == "redis-tls" {
			mount = &pod.Containers[0].VolumeMounts[i]
		}
	}
	for _, v := range pod.Volumes {
		if v.Name != "redis-tls" {
			continue
		}
		if v.Secret == nil {
			t.Fatalf("volume redis-tls is not a Secret: %+v", v.VolumeSource)
		}
		for _, it := range v.Secret.Items {
			got[it.Path] = v.Secret.SecretName + "/" + it.Key
			if s, ok := secrets[v.Secret.SecretName]; ok && len(s.Data[it.Key]) == 0 {
				t.Errorf("volume redis-tls mounts key %q of the Secret %s, which does not hold it", it.Key, s.Name)
			}
		}
	}
	if len(want) == 0 {
		want = map[string]string{}
	}
	if !maps.Equal(got, want) {
		t.Errorf("TLS files %v, want %v", got, want)
	}
	if len(want) > 0 && (mount == nil || !mount.ReadOnly) {
		t.Fatalf("volume redis-tls mounted as %+v, want read-only", mount)
	}
	for _, e := range pod.Containers[0].Env {
		if !strings.HasPrefix(e.Name, "REDIS_TLS_C") {
			continue
		}
		if mount == nil || path.Dir(e.Value) != mount.MountPath || want[path.Base(e.Value)] == "" {
			t.Errorf("%s=%s is not a file of the mounted volume redis-tls", e.Name, e.Value)
		}
	}
}

// deploymentText returns the Deployments of helm template's output.
func deploymentText(out []byte) string {
	var b strings.Builder
	for _, doc := range strings.Split(string(out), "\n---") {
		if strings.Contains(doc, "\nkind: Deployment\n") {
			b.WriteString(doc)
		}
	}
	return b.String()
}

// TestRedisRefuses: Redis values the binary would refuse, or that would
// leave a password in the Deployment or in two places, stop helm template.
func TestRedisRefuses(t *testing.T) {
	base := []string{"backend=redis", "redis.url=redis:6379"}
	cases := []struct {
		name string
		set  []string
		want string
	}{
		{"redis without url", []string{"backend=redis"}, "backend redis needs redis.url"},
		{"a password in the url", []string{"backend=redis", "redis.url=redis://user:pw@redis:6379"}, "redis.url holds a password"},
		{"a password in the per-second url", slices.Concat(base, []string{"redis.perSecond.enabled=true", "redis.perSecond.url=rediss://:pw@r2:6379"}), "redis.perSecond.url holds a password"},
		{"per-second without url", slices.Concat(base, []string{"redis.perSecond.enabled=true"}), "redis.perSecond.url"},
		{"a password in two places", slices.Concat(base, []string{"redis.auth.existingSecret=s", "redis.auth.password=pw"}), "keep the passwords in one place"},
		{"a sentinel key without a Secret", slices.Concat(base, []string{"redis.auth.existingSecretSentinelKey=k"}), "existingSecretSentinelKey is set but"},
		{"TLS files in two places", slices.Concat(base, []string{"redis.tls.enabled=true", "redis.tls.existingSecret=s", "redis.tls.ca=x"}), "keep the TLS files in one place"},
		{"a client certificate without its key", slices.Concat(base, []string{"redis.tls.enabled=true", "redis.tls.cert=x"}), "go together"},
		{"an existing certificate without its key", slices.Concat(base, []string{"redis.tls.enabled=true", "redis.tls.existingSecret=s", "redis.tls.certKey=tls.crt"}), "go together"},
		{"a CA without TLS", slices.Concat(base, []string{"redis.tls.ca=x"}), "no connection uses TLS"},
		{"the password in extraEnv", slices.Concat(base, []string{"extraEnv.REDIS_AUTH=pw"}), "extraEnv.REDIS_AUTH"},
		{"an unknown Redis type", slices.Concat(base, []string{"redis.type=replicated"}), "value must be one of"},
		{"a misspelled Redis value", slices.Concat(base, []string{"redis.pooSize=3"}), "additional properties 'pooSize' not allowed"},
		{"a negative pool", slices.Concat(base, []string{"redis.poolSize=-1"}), "minimum"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"template", "rel", chartDir}
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			_, err := helm(t, args...)
			if err == nil {
				t.Fatalf("helm template --set %v succeeded; want a refusal", tc.set)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("helm template --set %v failed without %q: %v", tc.set, tc.want, err)
			}
		})
	}
}
