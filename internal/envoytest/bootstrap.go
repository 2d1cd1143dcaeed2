package envoytest

import (
	"fmt"
	"net"
	"os"
	"strconv"

	"gopkg.in/yaml.v3"
)

// The ports the examples in examples/envoy use, as a reader would run them on
// one machine. Render maps them to the ports a test chose.
const (
	ExampleListenerPort = 10000 // Envoy's HTTP listener
	ExampleAdminPort    = 9901  // Envoy's admin interface
	ExampleServicePort  = 8081  // the ratelimit binary's gRPC port
	ExampleAppPort      = 8090  // the application behind Envoy (go run ./examples/upstream)
)

// Substitutions are the changes Render makes to a bootstrap, in the order of
// the fields.
type Substitutions struct {
	// Ports maps every socket_address port_value equal to a key to its value.
	Ports map[int]int
	// Strings replaces string values equal to a key (certificate paths).
	Strings map[string]string
	// Clusters points every endpoint of the named static clusters at
	// host:port, for a cluster whose target a test replaces (a receiver in
	// place of a service that does not exist yet).
	Clusters map[string]string
	// Edits change the parsed bootstrap last, in order: tests that break or
	// flip a setting on purpose.
	Edits []Edit
}

// An Edit changes a parsed bootstrap.
type Edit func(root map[string]any) error

// Render reads a bootstrap and returns it with s applied, as YAML. Anchors
// and aliases are expanded.
func Render(file string, s Substitutions) ([]byte, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("envoytest: %w", err)
	}
	var root map[string]any
	if err := yaml.Unmarshal(b, &root); err != nil {
		return nil, fmt.Errorf("envoytest: parse %s: %w", file, err)
	}
	walk(root, func(m map[string]any) {
		if p, ok := m["port_value"].(int); ok {
			if to, ok := s.Ports[p]; ok {
				m["port_value"] = to
			}
		}
		for k, v := range m {
			if str, ok := v.(string); ok {
				if to, ok := s.Strings[str]; ok {
					m[k] = to
				}
			}
		}
	})
	for name, target := range s.Clusters {
		if err := pointCluster(root, name, target); err != nil {
			return nil, fmt.Errorf("envoytest: %s: %w", file, err)
		}
	}
	for _, edit := range s.Edits {
		if err := edit(root); err != nil {
			return nil, fmt.Errorf("envoytest: edit %s: %w", file, err)
		}
	}
	out, err := yaml.Marshal(root)
	if err != nil {
		return nil, fmt.Errorf("envoytest: %w", err)
	}
	return out, nil
}

// pointCluster replaces the socket addresses of one static cluster's
// endpoints with target (host:port).
func pointCluster(root map[string]any, name, target string) error {
	host, portStr, err := net.SplitHostPort(target)
	if err != nil {
		return fmt.Errorf("cluster %s: %w", name, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return fmt.Errorf("cluster %s: port %q: %w", name, portStr, err)
	}
	for _, c := range list(get(root, "static_resources", "clusters")) {
		cm, _ := c.(map[string]any)
		if cm["name"] != name {
			continue
		}
		walk(cm["load_assignment"], func(m map[string]any) {
			if _, ok := m["socket_address"]; ok {
				m["socket_address"] = map[string]any{"address": host, "port_value": port}
			}
		})
		return nil
	}
	return fmt.Errorf("no static cluster %q", name)
}

// SetFilterField returns an Edit that sets field of the typed_config of
// every HTTP filter named filter (e.g. envoy.filters.http.ratelimit) to
// value, or deletes the field when value is nil.
func SetFilterField(filter, field string, value any) Edit {
	return func(root map[string]any) error {
		n := 0
		walk(root, func(m map[string]any) {
			for _, f := range list(m["http_filters"]) {
				fm, _ := f.(map[string]any)
				tc, ok := fm["typed_config"].(map[string]any)
				if fm["name"] != filter || !ok {
					continue
				}
				n++
				if value == nil {
					delete(tc, field)
				} else {
					tc[field] = value
				}
			}
		})
		if n == 0 {
			return fmt.Errorf("no HTTP filter %q", filter)
		}
		return nil
	}
}

// SetRateLimits returns an Edit that replaces the rate_limits (the
// descriptors the rate-limit filter asks for) of every virtual host that
// has them with rateLimits.
func SetRateLimits(rateLimits []any) Edit {
	return func(root map[string]any) error {
		n := 0
		walk(root, func(m map[string]any) {
			for _, vh := range list(m["virtual_hosts"]) {
				if vm, _ := vh.(map[string]any); vm["rate_limits"] != nil {
					vm["rate_limits"] = rateLimits
					n++
				}
			}
		})
		if n == 0 {
			return fmt.Errorf("no virtual host with rate_limits")
		}
		return nil
	}
}

// AppendRouteRateLimit returns an Edit that appends rateLimit to the
// rate_limits of every route's per-filter rate-limit configuration
// (RateLimitPerRoute, the only place hits_addend and apply_on_stream_done
// are honoured).
func AppendRouteRateLimit(rateLimit any) Edit {
	return onRouteRateLimits(func(per map[string]any) {
		per["rate_limits"] = append(list(per["rate_limits"]), rateLimit)
	})
}

// SetRouteRateLimits returns an Edit that replaces the rate_limits of every
// route's per-filter rate-limit configuration with rateLimits.
func SetRouteRateLimits(rateLimits []any) Edit {
	return onRouteRateLimits(func(per map[string]any) { per["rate_limits"] = rateLimits })
}

// onRouteRateLimits returns an Edit that applies f to every route's
// per-filter rate-limit configuration, and fails when there is none.
func onRouteRateLimits(f func(per map[string]any)) Edit {
	return func(root map[string]any) error {
		n := 0
		walk(root, func(m map[string]any) {
			per, _ := get(m, "typed_per_filter_config", "envoy.filters.http.ratelimit").(map[string]any)
			if per == nil {
				return
			}
			f(per)
			n++
		})
		if n == 0 {
			return fmt.Errorf("no route with a rate-limit configuration of its own")
		}
		return nil
	}
}

// RemoveAccessLog returns an Edit that removes the access loggers of every
// HTTP connection manager (the same bootstrap without its access log).
func RemoveAccessLog() Edit {
	return func(root map[string]any) error {
		n := 0
		walk(root, func(m map[string]any) {
			if m["access_log"] != nil && m["route_config"] != nil {
				delete(m, "access_log")
				n++
			}
		})
		if n == 0 {
			return fmt.Errorf("no HTTP connection manager with an access log")
		}
		return nil
	}
}

// MoveFilterLast returns an Edit that moves the HTTP filter named filter to
// the end of its chain (after the router: a broken example).
func MoveFilterLast(filter string) Edit {
	return func(root map[string]any) error {
		moved := false
		walk(root, func(m map[string]any) {
			fs := list(m["http_filters"])
			for i, f := range fs {
				if fm, _ := f.(map[string]any); fm["name"] == filter {
					rest := append(append([]any{}, fs[:i]...), fs[i+1:]...)
					m["http_filters"] = append(rest, f)
					moved = true
					return
				}
			}
		})
		if !moved {
			return fmt.Errorf("no HTTP filter %q", filter)
		}
		return nil
	}
}

// RemoveFilter returns an Edit that drops the HTTP filter named filter
// from every chain that has it.
func RemoveFilter(filter string) Edit {
	return func(root map[string]any) error {
		n := 0
		walk(root, func(m map[string]any) {
			fs := list(m["http_filters"])
			kept := fs[:0:0]
			for _, f := range fs {
				if fm, _ := f.(map[string]any); fm["name"] == filter {
					n++
					continue
				}
				kept = append(kept, f)
			}
			if len(kept) != len(fs) {
				m["http_filters"] = kept
			}
		})
		if n == 0 {
			return fmt.Errorf("no HTTP filter %q", filter)
		}
		return nil
	}
}

// walk calls f on every mapping under v, parents first. f may replace
// values of the mapping it is given.
func walk(v any, f func(map[string]any)) {
	switch x := v.(type) {
	case map[string]any:
		f(x)
		for _, c := range x {
			walk(c, f)
		}
	case []any:
		for _, c := range x {
			walk(c, f)
		}
	}
}

// get follows keys through nested mappings and returns what it finds there,
// or nil.
func get(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func list(v any) []any {
	l, _ := v.([]any)
	return l
}
