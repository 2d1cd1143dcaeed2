package service

import (
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// metadata returns the response's dynamic metadata as envoyproxy/ratelimit
// builds it: the request (domain, descriptors as "key=value" entries with
// their limit override and hits_addend, the request's hitsAddend), the
// quota-mode fields (quotaModeEnabled; quotaModeViolations, the indices of
// quota-mode descriptors over their limit, when there are any) and the
// merged metadata of the rules of the descriptors that passed.
func metadata(req *pb.RateLimitRequest, items []item) *structpb.Struct {
	fields := make(map[string]*structpb.Value, 6)
	fields["domain"] = structpb.NewStringValue(req.GetDomain())

	ds := req.GetDescriptors()
	list := make([]*structpb.Value, 0, len(ds))
	for _, d := range ds {
		df := make(map[string]*structpb.Value, 3)
		entries := make([]*structpb.Value, 0, len(d.GetEntries()))
		for _, e := range d.GetEntries() {
			entries = append(entries, structpb.NewStringValue(e.GetKey()+"="+e.GetValue()))
		}
		df["entries"] = structpb.NewListValue(&structpb.ListValue{Values: entries})
		if o := d.GetLimit(); o != nil {
			lf := map[string]*structpb.Value{
				"requestsPerUnit": structpb.NewNumberValue(float64(o.GetRequestsPerUnit())),
				"unit":            structpb.NewStringValue(o.GetUnit().String()),
			}
			if m := o.GetUnitMultiplier(); m != nil {
				lf["unitMultiplier"] = structpb.NewNumberValue(float64(m.GetValue()))
			}
			df["limit"] = structpb.NewStructValue(&structpb.Struct{Fields: lf})
		}
		if h := d.GetHitsAddend(); h != nil {
			df["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		list = append(list, structpb.NewStructValue(&structpb.Struct{Fields: df}))
	}
	fields["descriptors"] = structpb.NewListValue(&structpb.ListValue{Values: list})
	if h := req.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}

	quota := false
	var violations []*structpb.Value
	var merged *structpb.Struct
	for i := range items {
		it := &items[i]
		if !it.applies() {
			if it.rule.matched && it.rule.unlimited && !it.rule.replaced {
				merged = mergeRuleMetadata(merged, it)
			}
			continue
		}
		if it.rule.quota && !it.rule.override {
			quota = true
			if it.decided.violated {
				violations = append(violations, structpb.NewNumberValue(float64(i)))
			}
		}
		if !it.decided.violated {
			merged = mergeRuleMetadata(merged, it)
		}
	}
	fields["quotaModeEnabled"] = structpb.NewBoolValue(quota)
	if len(violations) > 0 {
		fields["quotaModeViolations"] = structpb.NewListValue(&structpb.ListValue{Values: violations})
	}
	if merged != nil && len(merged.GetFields()) > 0 {
		fields["metadata"] = structpb.NewStructValue(merged)
	}
	return &structpb.Struct{Fields: fields}
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
