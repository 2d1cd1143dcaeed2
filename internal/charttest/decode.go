package charttest

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// ServiceMonitor is the part of monitoring.coreos.com/v1 ServiceMonitor the
// chart renders; fields it does not list are refused.
type ServiceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              ServiceMonitorSpec `json:"spec"`
}

// ServiceMonitorSpec selects the Services to scrape and how.
type ServiceMonitorSpec struct {
	Selector          metav1.LabelSelector `json:"selector"`
	Endpoints         []Endpoint           `json:"endpoints"`
	NamespaceSelector *struct {
		Any        bool     `json:"any,omitempty"`
		MatchNames []string `json:"matchNames,omitempty"`
	} `json:"namespaceSelector,omitempty"`
}

// Endpoint is one scraped port of a ServiceMonitor.
type Endpoint struct {
	Port          string `json:"port"`
	Path          string `json:"path,omitempty"`
	Interval      string `json:"interval,omitempty"`
	ScrapeTimeout string `json:"scrapeTimeout,omitempty"`
}

// Object is one rendered manifest decoded into its API type.
type Object struct {
	Kind, Name string
	// Source is the template it came from (helm's "# Source:" line).
	Source string
	// Value is a pointer to the API type of Kind.
	Value any
}

// newObject returns a pointer to the API type of apiVersion and kind, or
// nil when the chart is not expected to render that kind.
func newObject(apiVersion, kind string) any {
	switch apiVersion + " " + kind {
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}
	case "v1 Service":
		return &corev1.Service{}
	case "v1 ServiceAccount":
		return &corev1.ServiceAccount{}
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}
	case "v1 Secret":
		return &corev1.Secret{}
	case "autoscaling/v2 HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}
	case "monitoring.coreos.com/v1 ServiceMonitor":
		return &ServiceMonitor{}
	}
	return nil
}

var sourceLine = regexp.MustCompile(`(?m)^# Source: (\S+)`)

// Decode splits helm template's output into documents and strictly decodes
// each into the API type of its kind: an unknown kind, an unknown or
// duplicated field, or a value of the wrong type is an error.
func Decode(manifests []byte) ([]Object, error) {
	var objs []Object
	for _, doc := range bytes.Split(manifests, []byte("\n---")) {
		doc = bytes.TrimPrefix(bytes.TrimSpace(doc), []byte("---"))
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		src := ""
		if m := sourceLine.FindSubmatch(doc); m != nil {
			src = string(m[1])
		}
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return nil, fmt.Errorf("%s: %w", src, err)
		}
		v := newObject(meta.APIVersion, meta.Kind)
		if v == nil {
			return nil, fmt.Errorf("%s: unexpected kind %s %s", src, meta.APIVersion, meta.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, v); err != nil {
			return nil, fmt.Errorf("%s: %s %s: %w", src, meta.APIVersion, meta.Kind, err)
		}
		name := ""
		if o, ok := v.(metav1.Object); ok {
			name = o.GetName()
		}
		objs = append(objs, Object{Kind: meta.Kind, Name: name, Source: src, Value: v})
	}
	return objs, nil
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, line := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.Bytes()
}
