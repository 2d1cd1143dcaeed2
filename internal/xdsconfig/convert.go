package xdsconfig

import (
	"fmt"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"gopkg.in/yaml.v3"

	"github.com/dynalimit/dynalimit/pkg/descriptors"
)

// ToFile renders one RateLimitConfig resource as descriptor YAML, named
// "xds:<resource name>" (the domain when the resource has no name) in
// problems. It writes each field under the name a file gives it
// (envoyproxy/ratelimit's YAML schema), so that descriptors.Parse judges a
// pushed configuration exactly as it judges a file. Units are written as
// the enum names them (MINUTE); an unset unit (UNKNOWN) is left out, so
// Parse rejects a limit without one and accepts it on an unlimited rule,
// as envoyproxy/ratelimit does.
func ToFile(c *rlsconf.RateLimitConfig) (descriptors.File, error) {
	name := c.GetName()
	if name == "" {
		name = c.GetDomain()
	}
	doc := map[string]any{"domain": c.GetDomain()}
	if ds := c.GetDescriptors(); len(ds) > 0 {
		doc["descriptors"] = descriptorList(ds)
	}
	data, err := yaml.Marshal(doc)
	if err != nil {
		return descriptors.File{}, fmt.Errorf("xdsconfig: render %s: %w", name, err)
	}
	return descriptors.File{Name: "xds:" + name, Data: data}, nil
}

func descriptorList(ds []*rlsconf.RateLimitDescriptor) []any {
	out := make([]any, 0, len(ds))
	for _, d := range ds {
		m := map[string]any{"key": d.GetKey()}
		if d.GetValue() != "" {
			m["value"] = d.GetValue()
		}
		if rl := d.GetRateLimit(); rl != nil {
			m["rate_limit"] = policy(rl)
		}
		if len(d.GetDescriptors()) > 0 {
			m["descriptors"] = descriptorList(d.GetDescriptors())
		}
		if d.GetShadowMode() {
			m["shadow_mode"] = true
		}
		if d.GetDetailedMetric() {
			m["detailed_metric"] = true
		}
		if d.GetQuotaMode() {
			m["quota_mode"] = true
		}
		if md := d.GetMetadata(); md != nil {
			m["metadata"] = md.AsMap()
		}
		out = append(out, m)
	}
	return out
}

func policy(p *rlsconf.RateLimitPolicy) map[string]any {
	m := map[string]any{"requests_per_unit": p.GetRequestsPerUnit()}
	if p.GetUnit() != rlsconf.RateLimitUnit_UNKNOWN {
		m["unit"] = p.GetUnit().String()
	}
	if p.GetUnlimited() {
		m["unlimited"] = true
	}
	if p.GetName() != "" {
		m["name"] = p.GetName()
	}
	if rs := p.GetReplaces(); len(rs) > 0 {
		list := make([]any, 0, len(rs))
		for _, r := range rs {
			list = append(list, map[string]any{"name": r.GetName()})
		}
		m["replaces"] = list
	}
	return m
}
