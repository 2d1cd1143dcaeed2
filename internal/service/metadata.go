package service

import (
	"strings"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// metadata returns the response's dynamic metadata as envoyproxy/ratelimit
// builds it: the request (domain; descriptors as "key=value" entries, with
// a limit override in its protobuf text form and the descriptor's
// hits_addend; the request's hitsAddend when not 0) and, under "metadata",
// the merged metadata of the rules of the descriptors that passed. A
// descriptor passed when its status is not OVER_LIMIT and its rule is
// neither unlimited nor replaced: a shadow-mode rule over its limit passes
// (its status is OK), a quota-mode rule over its limit does not. Merging
// follows the request's order; a key already present wins, nested maps
// merge.
//
// extended (RESPONSE_DYNAMIC_METADATA_FORMAT=extended) adds this service's
// fields: a limit override as a struct (requestsPerUnit, unit,
// unitMultiplier) instead of its text form, quotaModeEnabled (whether a
// quota-mode rule applied) and quotaModeViolations (the indices of the
// quota-mode descriptors over their limit, when there are any).
func metadata(req *pb.RateLimitRequest, items []item, statuses []*pb.RateLimitResponse_DescriptorStatus, extended bool) *structpb.Struct {
	fields := make(map[string]*structpb.Value, 6)
	fields["domain"] = structpb.NewStringValue(req.GetDomain())

	ds := req.GetDescriptors()
	list := make([]*structpb.Value, 0, len(ds))
	for i, d := range ds {
		df := make(map[string]*structpb.Value, 3)
		entries := make([]*structpb.Value, 0, len(d.GetEntries()))
		for _, e := range d.GetEntries() {
			entries = append(entries, structpb.NewStringValue(e.GetKey()+"="+e.GetValue()))
		}
		df["entries"] = structpb.NewListValue(&structpb.ListValue{Values: entries})
		if o := d.GetLimit(); o != nil {
			df["limit"] = overrideValue(o, extended)
		}
		if h := d.GetHitsAddend(); h != nil {
			df["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		if i < len(items) {
			if v := refusedLevel(&items[i]); v != nil {
				df["refusedBy"] = v
			}
		}
		list = append(list, structpb.NewStructValue(&structpb.Struct{Fields: df}))
	}
	fields["descriptors"] = structpb.NewListValue(&structpb.ListValue{Values: list})
	if h := req.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}

	var merged *structpb.Struct
	for i := range items {
		it := &items[i]
		if it.applies() && statuses[i].GetCode() != pb.RateLimitResponse_OVER_LIMIT {
			merged = mergeRuleMetadata(merged, it)
		}
	}
	if merged != nil && len(merged.GetFields()) > 0 {
		fields["metadata"] = structpb.NewStructValue(merged)
	}
	if extended {
		quotaFields(fields, items)
	}
	return &structpb.Struct{Fields: fields}
}

// refusedLevel names the level of a hierarchical descriptor that refused
// it: its depth (0 the descriptor's own entity, 1 its parent, ...), the
// entity and, for a configured level, its descriptor key. Nil for a
// descriptor that was not refused or has no hierarchy.
func refusedLevel(it *item) *structpb.Value {
	d := &it.decided
	if !it.applies() || !d.refused || d.worst < 0 || !it.hierarchical() {
		return nil
	}
	t := &it.rule.tiers[d.worstAt]
	entity, _, _ := strings.Cut(t.key.Entity, "#")
	f := map[string]*structpb.Value{
		"depth":  structpb.NewNumberValue(float64(t.depth)),
		"entity": structpb.NewStringValue(entity),
	}
	if t.level != "" {
		f["key"] = structpb.NewStringValue(t.level)
	}
	return structpb.NewStructValue(&structpb.Struct{Fields: f})
}

// overrideValue is a descriptor's limit override in the metadata: the
// message's protobuf text form, as envoyproxy/ratelimit writes it, or a
// struct when extended.
func overrideValue(o *rlv3.RateLimitDescriptor_RateLimitOverride, extended bool) *structpb.Value {
	if !extended {
		return structpb.NewStringValue(o.String())
	}
	lf := map[string]*structpb.Value{
		"requestsPerUnit": structpb.NewNumberValue(float64(o.GetRequestsPerUnit())),
		"unit":            structpb.NewStringValue(o.GetUnit().String()),
	}
	if m := o.GetUnitMultiplier(); m != nil {
		lf["unitMultiplier"] = structpb.NewNumberValue(float64(m.GetValue()))
	}
	return structpb.NewStructValue(&structpb.Struct{Fields: lf})
}

// quotaFields adds quotaModeEnabled and, when some quota-mode descriptor is
// over its limit, quotaModeViolations (their indices).
func quotaFields(fields map[string]*structpb.Value, items []item) {
	quota := false
	var violations []*structpb.Value
	for i := range items {
		it := &items[i]
		if !it.applies() || !it.rule.quota || it.rule.override {
			continue
		}
		quota = true
		if it.decided.violated {
			violations = append(violations, structpb.NewNumberValue(float64(i)))
		}
	}
	fields["quotaModeEnabled"] = structpb.NewBoolValue(quota)
	if len(violations) > 0 {
		fields["quotaModeViolations"] = structpb.NewListValue(&structpb.ListValue{Values: violations})
	}
}

// mergeRuleMetadata merges the metadata of an item's rule into dst (created
// when nil); keys already present win, nested maps merge.
func mergeRuleMetadata(dst *structpb.Struct, it *item) *structpb.Struct {
	r := &it.rule
	if !r.matched || r.override || len(r.match.Rule.MetadataTree) == 0 {
		return dst
	}
	src, err := structpb.NewStruct(r.match.Rule.MetadataTree)
	if err != nil {
		return dst
	}
	if dst == nil {
		return src
	}
	mergeStruct(dst, src)
	return dst
}

func mergeStruct(dst, src *structpb.Struct) {
	for k, v := range src.GetFields() {
		cur, ok := dst.Fields[k]
		if !ok {
			dst.Fields[k] = v
			continue
		}
		if a, b := cur.GetStructValue(), v.GetStructValue(); a != nil && b != nil {
			mergeStruct(a, b)
		}
	}
}
