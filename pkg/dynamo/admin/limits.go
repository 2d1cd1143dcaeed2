package admin

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Limits returns the limits stored at scope (ErrNotFound when none).
func (s *Store) Limits(ctx context.Context, sc Scope) (map[string]tokenbucket.Limit, error) {
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	pk, sk := sc.Key(s.t.NsOr(sc.Namespace))
	it, err := s.t.Get(ctx, pk, sk)
	if err != nil {
		return nil, err
	}
	l := item.DecodeLimits(it)
	if l == nil {
		return nil, fmt.Errorf("dynamo: limits of %s: %w", sc, dynamo.ErrNotFound)
	}
	return l, nil
}

// SetLimits stores limits at scope, merged over those already there, and
// writes an audit record.
func (s *Store) SetLimits(ctx context.Context, sc Scope, limits map[string]tokenbucket.Limit) error {
	if err := sc.Validate(); err != nil {
		return err
	}
	if len(limits) == 0 {
		return errors.New("dynamo: set limits: no limits given")
	}
	ns := s.t.NsOr(sc.Namespace)
	before, err := s.Limits(ctx, sc)
	if err != nil && !errors.Is(err, dynamo.ErrNotFound) {
		return err
	}
	after := map[string]tokenbucket.Limit{}
	for k, v := range before {
		after[k] = v
	}
	for k, v := range limits {
		after[k] = v
	}
	if err := s.putConfig(ctx, sc, ns, after); err != nil {
		return err
	}
	return s.writeAudit(ctx, ns, sc, "limits.set", FormatLimits(before), FormatLimits(after))
}

// DeleteLimits removes the named limits at scope (all of them when names is
// empty) and writes an audit record.
func (s *Store) DeleteLimits(ctx context.Context, sc Scope, names ...string) error {
	if err := sc.Validate(); err != nil {
		return err
	}
	ns := s.t.NsOr(sc.Namespace)
	before, err := s.Limits(ctx, sc)
	if err != nil {
		return err
	}
	after := map[string]tokenbucket.Limit{}
	if len(names) > 0 {
		for k, v := range before {
			after[k] = v
		}
		for _, n := range names {
			if _, ok := after[n]; !ok {
				return fmt.Errorf("dynamo: delete limit %q of %s: %w", n, sc, dynamo.ErrNotFound)
			}
			delete(after, n)
		}
	}
	pk, sk := sc.Key(ns)
	if len(after) == 0 {
		cctx, cancel := s.t.Call(ctx)
		defer cancel()
		if _, err := s.t.API.DeleteItem(cctx, &dynamodb.DeleteItemInput{TableName: aws.String(s.t.Name), Key: item.Key(pk, sk)}); err != nil {
			return dynamo.Classify("delete limits", err)
		}
	} else if err := s.putConfig(ctx, sc, ns, after); err != nil {
		return err
	}
	s.st.ForgetConfig(pk, sk)
	return s.writeAudit(ctx, ns, sc, "limits.delete", FormatLimits(before), FormatLimits(after))
}

func (s *Store) putConfig(ctx context.Context, sc Scope, ns string, limits map[string]tokenbucket.Limit) error {
	pk, sk := sc.Key(ns)
	it := item.Key(pk, sk)
	it[item.AttrLimits] = item.EncodeLimits(limits)
	it[item.AttrNamespace] = item.StrAV(ns)
	if sc.Entity != "" {
		it[item.AttrEntity] = item.StrAV(sc.Entity)
	}
	if sc.Resource != "" {
		it[item.AttrResource] = item.StrAV(sc.Resource)
	}
	cctx, cancel := s.t.Call(ctx)
	defer cancel()
	if _, err := s.t.API.PutItem(cctx, &dynamodb.PutItemInput{TableName: aws.String(s.t.Name), Item: it}); err != nil {
		return dynamo.Classify("put limits", err)
	}
	s.st.ForgetConfig(pk, sk)
	return nil
}
