package charttest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/dynalimit/dynalimit/internal/config"
	"github.com/dynalimit/dynalimit/internal/testutil"
)

const chartDir = "charts/dynalimit"

// helm runs the pinned helm in the repository root, building it first when
// it is missing; it skips t under -short.
func helm(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	if testing.Short() {
		t.Skip("charttest: builds and runs helm, which -short does not")
	}
	root := testutil.RepoRoot(t)
	start := time.Now()
	bin, err := Helm(root)
	if err != nil {
		t.Fatalf("charttest: helm %s is needed and could not be built: %v", HelmVersion, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Logf("built helm %s in %s", HelmVersion, d.Round(time.Second))
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// valueSets are the value files the chart is rendered with.
var valueSets = []struct {
	name  string
	args  []string
	kinds []string // every kind rendered, sorted
	lease leaseWant
}{
	{"defaults", nil, []string{"ConfigMap", "Deployment", "Secret", "Service", "ServiceAccount"},
		leaseWant{secret: "rel-dynalimit-lease", key: "keys", rendered: true, ttl: config.Defaults().LeaseTTL}},
	{"full", []string{"-f", "internal/charttest/testdata/full-values.yaml"},
		[]string{"ConfigMap", "ConfigMap", "Deployment", "HorizontalPodAutoscaler", "PodDisruptionBudget", "Service", "ServiceAccount", "ServiceMonitor"},
		leaseWant{secret: "dynalimit-lease-keys", key: "signing", ttl: 30 * time.Minute}},
	{"lease key", []string{"-f", "internal/charttest/testdata/lease-key-values.yaml"}, []string{"ConfigMap", "Deployment", "Secret", "Service", "ServiceAccount"},
		leaseWant{secret: "rel-dynalimit-lease", key: "keys", rendered: true, ttl: 5 * time.Minute,
			keys: []string{"test-only-signing-key-0123456789abcdef", "test-only-previous-key-0123456789abcdef"}}},
}

func render(t *testing.T, args []string) []Object {
	t.Helper()
	out, err := helm(t, append([]string{"template", "rel", chartDir, "--namespace", "ns"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Decode(out)
	if err != nil {
		t.Fatalf("strict decode of the rendered chart: %v", err)
	}
	return objs
}

func TestLint(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			out, err := helm(t, append([]string{"lint", "--strict", chartDir}, vs.args...)...)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
}

func TestTemplate(t *testing.T) {
	defaults := config.Defaults()
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			objs := render(t, vs.args)
			var kinds []string
			byKind := map[string][]any{}
			for _, o := range objs {
				kinds = append(kinds, o.Kind)
				byKind[o.Kind] = append(byKind[o.Kind], o.Value)
			}
			slices.Sort(kinds)
			if !slices.Equal(kinds, vs.kinds) {
				t.Fatalf("rendered kinds %v, want %v", kinds, vs.kinds)
			}
			dep := byKind["Deployment"][0].(*appsv1.Deployment)
			svc := byKind["Service"][0].(*corev1.Service)
			pod := dep.Spec.Template.Spec
			if len(pod.Containers) != 1 {
				t.Fatalf("%d containers, want 1", len(pod.Containers))
			}
			c := pod.Containers[0]

			// The environment is settings the binary knows, and valid.
			known := map[string]bool{}
			for _, v := range config.Table() {
				known[v.Name] = true
			}
			env := map[string]string{}
			for _, e := range c.Env {
				if !known[e.Name] {
					t.Errorf("env %s is not a setting of the binary (ratelimit settings)", e.Name)
				}
				if _, dup := env[e.Name]; dup {
					t.Errorf("env %s is set twice", e.Name)
				}
				env[e.Name] = e.Value
			}
			s, err := config.FromEnv(func(k string) string { return env[k] })
			if err != nil {
				t.Fatalf("the rendered env does not load as settings: %v", err)
			}
			if err := s.Validate(); err != nil {
				t.Fatalf("the rendered env is not valid settings: %v", err)
			}

			// Ports and probes are the binary's defaults.
			ports := map[string]int32{}
			for _, p := range c.Ports {
				ports[p.Name] = p.ContainerPort
			}
			want := map[string]int{"grpc": s.GRPCPort, "http": s.Port, "metrics": s.DebugPort}
			for name, port := range want {
				if int(ports[name]) != port {
					t.Errorf("container port %s = %d, the binary listens on %d", name, ports[name], port)
				}
			}
			if s.GRPCPort != defaults.GRPCPort || s.Port != defaults.Port || s.DebugPort != defaults.DebugPort {
				t.Errorf("the chart moves the listeners off the binary's default ports")
			}
			// Readiness follows the store and the drain; liveness the
			// process alone, so that a DynamoDB outage restarts no pod.
			for name, want := range map[string]string{"readiness": "/healthcheck", "liveness": "/livez"} {
				p := map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe}[name]
				if p == nil || p.HTTPGet == nil {
					t.Errorf("no HTTP %s probe", name)
					continue
				}
				if p.HTTPGet.Path != want || p.HTTPGet.Port.String() != "http" {
					t.Errorf("%s probe GET %s on port %s, want %s on http", name, p.HTTPGet.Path, p.HTTPGet.Port.String(), want)
				}
			}
			if l, r := c.LivenessProbe, c.ReadinessProbe; l.FailureThreshold*l.PeriodSeconds <= r.FailureThreshold*r.PeriodSeconds {
				t.Errorf("liveness (%d×%ds) is not more lenient than readiness (%d×%ds)", l.FailureThreshold, l.PeriodSeconds, r.FailureThreshold, r.PeriodSeconds)
			}
			svcPorts := map[string]string{}
			for _, p := range svc.Spec.Ports {
				svcPorts[p.Name] = p.TargetPort.String()
			}
			for name := range want {
				if svcPorts[name] != name {
					t.Errorf("Service port %s targets %q, want the container port %s", name, svcPorts[name], name)
				}
			}

			// Drain: the grace period outlasts SHUTDOWN_DRAIN + SHUTDOWN_TIMEOUT.
			grace := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
			if grace <= s.ShutdownDrain+s.ShutdownTimeout {
				t.Errorf("terminationGracePeriodSeconds %s is not above SHUTDOWN_DRAIN %s + SHUTDOWN_TIMEOUT %s", grace, s.ShutdownDrain, s.ShutdownTimeout)
			}

			// Security.
			sc := c.SecurityContext
			if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser != 65534 ||
				sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				t.Errorf("container securityContext %+v: want runAsNonRoot, runAsUser 65534, readOnlyRootFilesystem", sc)
			}

			// The descriptor ConfigMap is the directory the binary reads and watches.
			var mount string
			for _, m := range c.VolumeMounts {
				if m.Name == "descriptors" {
					mount = m.MountPath
				}
			}
			if mount == "" || s.ConfigDir() != mount || s.WatchDir() != mount {
				t.Errorf("descriptors mounted at %q; the binary reads %s and watches %s", mount, s.ConfigDir(), s.WatchDir())
			}
			var cm *corev1.ConfigMap
			for _, v := range byKind["ConfigMap"] {
				if m := v.(*corev1.ConfigMap); strings.HasSuffix(m.Name, "-config") {
					cm = m
				}
			}
			if cm == nil {
				t.Fatal("no descriptor ConfigMap")
			}
			for _, vol := range pod.Volumes {
				if vol.Name == "descriptors" && (vol.ConfigMap == nil || vol.ConfigMap.Name != cm.Name) {
					t.Errorf("the descriptors volume is not the ConfigMap %s", cm.Name)
				}
			}
			dir := t.TempDir()
			for file, text := range cm.Data {
				if err := os.WriteFile(filepath.Join(dir, file), []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := s.Loader()(dir); err != nil {
				t.Errorf("the descriptor ConfigMap does not load: %v", err)
			}
			if len(pod.TopologySpreadConstraints) == 0 {
				t.Error("no topologySpreadConstraints")
			}
			checkLease(t, vs.lease, objs, pod, s)

			if vs.name != "full" {
				if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 2 {
					t.Errorf("replicas %v, want 2", dep.Spec.Replicas)
				}
				return
			}
			if dep.Spec.Replicas != nil {
				t.Errorf("replicas is set although the HPA scales the Deployment")
			}
			if s.BackendType != config.BackendDynamoDB || s.DynamoDBTable != "ratelimit-prod" || s.AWSRegion != "eu-west-1" || s.Namespace != "payments" {
				t.Errorf("DynamoDB settings: %s %s %s %s", s.BackendType, s.DynamoDBTable, s.AWSRegion, s.Namespace)
			}
			sa := byKind["ServiceAccount"][0].(*corev1.ServiceAccount)
			if got := sa.Annotations["eks.amazonaws.com/role-arn"]; got != "arn:aws:iam::123456789012:role/dynalimit" {
				t.Errorf("ServiceAccount role-arn annotation %q", got)
			}
			if pod.ServiceAccountName != sa.Name {
				t.Errorf("pods run as %q, the ServiceAccount is %q", pod.ServiceAccountName, sa.Name)
			}
			if c.Image != "ghcr.io/dynalimit/dynalimit:1.2.3" {
				t.Errorf("image %s", c.Image)
			}
			sm := byKind["ServiceMonitor"][0].(*ServiceMonitor)
			if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "metrics" || sm.Spec.Endpoints[0].Path != "/metrics" {
				t.Errorf("ServiceMonitor endpoints %+v, want /metrics on port metrics", sm.Spec.Endpoints)
			}
			var dash *corev1.ConfigMap
			for _, v := range byKind["ConfigMap"] {
				if m := v.(*corev1.ConfigMap); m.Labels["grafana_dashboard"] == "1" {
					dash = m
				}
			}
			if dash == nil {
				t.Fatal("no ConfigMap labelled grafana_dashboard: \"1\"")
			}
			shipped, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), chartDir, "dashboards", "dynalimit.json"))
			if err != nil {
				t.Fatal(err)
			}
			if strings.TrimSpace(dash.Data["dynalimit.json"]) != strings.TrimSpace(string(shipped)) {
				t.Error("the dashboard ConfigMap does not hold dashboards/dynalimit.json")
			}
		})
	}
}

// TestSchemaRefuses: values the schema does not allow stop helm template
// (and so helm install).
func TestSchemaRefuses(t *testing.T) {
	cases := []struct {
		name, set, want string
	}{
		{"misspelled value", "replicaCount2=3", "additional properties 'replicaCount2' not allowed"},
		{"misspelled nested value", "dynamodb.tabel=x", "additional properties 'tabel' not allowed"},
		{"unknown backend", "backend=memcache", "value must be one of"},
		{"wrong type", "replicaCount=many", "want integer"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := helm(t, "template", "rel", chartDir, "--set", tc.set)
			if err == nil {
				t.Fatalf("helm template --set %s succeeded; the schema should refuse it", tc.set)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("helm template --set %s failed without %q: %v", tc.set, tc.want, err)
			}
		})
	}
}

// TestStrictDecodeRefuses: Decode refuses what the API server would not
// take, so TestTemplate would catch it in a template.
func TestStrictDecodeRefuses(t *testing.T) {
	cases := []struct {
		name, doc, want string
	}{
		{"unknown Deployment field", `apiVersion: apps/v1
kind: Deployment
metadata: {name: x}
spec:
  template:
    spec:
      containers:
        - name: c
          imagePullPolizy: Always
`, `unknown field "imagePullPolizy"`},
		{"unknown Service field", "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {portz: []}\n", `unknown field "portz"`},
		{"unknown ServiceMonitor field", "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: x}\nspec:\n  endpoints: [{port: metrics, intervall: 5s}]\n", `unknown field "intervall"`},
		{"wrong type", "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: [x]}\n", "cannot unmarshal"},
		{"unexpected kind", "apiVersion: batch/v1\nkind: Job\nmetadata: {name: x}\n", "unexpected kind batch/v1 Job"},
		{"unknown Secret field", "apiVersion: v1\nkind: Secret\nmetadata: {name: x}\ndate: {keys: eA==}\n", `unknown field "date"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode([]byte("---\n# Source: test.yaml\n" + tc.doc))
			if err == nil {
				t.Fatal("decoded; want an error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
	if objs, err := Decode([]byte("---\n# Source: ok.yaml\napiVersion: v1\nkind: ServiceAccount\nmetadata: {name: x}\n")); err != nil || len(objs) != 1 {
		t.Fatalf("a valid ServiceAccount: %v, %v", objs, err)
	}
}

// TestAggregatorDeployment: with aggregator.enabled on DynamoDB, the chart
// runs the stream poller beside the service: `ratelimit aggregator` with
// settings the binary knows, on the service's table, alive on /livez.
func TestAggregatorDeployment(t *testing.T) {
	objs := render(t, []string{"--set", "backend=dynamodb", "--set", "aggregator.enabled=true", "--set", "aggregator.replicas=2"})
	var deps []*appsv1.Deployment
	for _, o := range objs {
		if d, ok := o.Value.(*appsv1.Deployment); ok {
			deps = append(deps, d)
		}
	}
	if len(deps) != 2 {
		t.Fatalf("%d Deployments, want the service's and the aggregator's", len(deps))
	}
	var svc, agg *appsv1.Deployment
	for _, d := range deps {
		if strings.HasSuffix(d.Name, "-aggregator") {
			agg = d
		} else {
			svc = d
		}
	}
	if agg == nil || svc == nil {
		t.Fatalf("Deployments %s and %s, want one named …-aggregator", deps[0].Name, deps[1].Name)
	}
	if r := agg.Spec.Replicas; r == nil || *r != 2 {
		t.Errorf("aggregator replicas %v, want 2", r)
	}
	c := agg.Spec.Template.Spec.Containers[0]
	if !slices.Equal(c.Args, []string{"aggregator"}) {
		t.Errorf("aggregator args %q, want [aggregator]", c.Args)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	s, err := config.FromEnv(func(k string) string { return env[k] })
	if err != nil || s.Validate() != nil {
		t.Fatalf("the aggregator's env does not load as valid settings: %v, %v", err, s.Validate())
	}
	svcEnv := map[string]string{}
	for _, e := range svc.Spec.Template.Spec.Containers[0].Env {
		svcEnv[e.Name] = e.Value
	}
	for _, k := range []string{"DYNAMODB_TABLE", "AWS_REGION", "NAMESPACE"} {
		if env[k] != svcEnv[k] {
			t.Errorf("%s: aggregator %q, service %q; want the same table", k, env[k], svcEnv[k])
		}
	}
	if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/livez" || p.HTTPGet.Port.String() != "metrics" {
		t.Errorf("aggregator liveness probe %+v, want GET /livez on metrics", p)
	}
	// Neither the Service nor the service's Deployment selects the
	// aggregator's pods.
	pods := agg.Spec.Template.Labels
	for _, o := range objs {
		var sel map[string]string
		switch v := o.Value.(type) {
		case *corev1.Service:
			sel = v.Spec.Selector
		case *appsv1.Deployment:
			if v == agg {
				continue
			}
			sel = v.Spec.Selector.MatchLabels
		default:
			continue
		}
		selects := true
		for k, v := range sel {
			selects = selects && pods[k] == v
		}
		if selects {
			t.Errorf("%s %v selects the aggregator's pods %v", o.Kind, sel, pods)
		}
	}
}
