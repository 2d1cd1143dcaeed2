package rlqs

import (
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Kinds of bucket action, as Observer.Pushed counts them.
const (
	kindTokenBucket = "token_bucket"
	kindAllowAll    = "allow_all"
	kindDenyAll     = "deny_all"
	kindAbandon     = "abandon"
)

type action = rlqspb.RateLimitQuotaResponse_BucketAction

// assignment is a quota assignment of strategy for ttl.
func assignment(id *rlqspb.BucketId, ttl time.Duration, strategy *typev3.RateLimitStrategy) *action {
	return &action{
		BucketId: id,
		BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: durationpb.New(ttl),
				RateLimitStrategy:    strategy,
			},
		},
	}
}

// tokenBucket assigns grant g for ttl.
func tokenBucket(id *rlqspb.BucketId, g grant, ttl time.Duration) *action {
	return assignment(id, ttl, &typev3.RateLimitStrategy{
		Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
			MaxTokens:     g.maxTokens,
			TokensPerFill: wrapperspb.UInt32(g.tokensPerFill),
			FillInterval:  durationpb.New(g.fillInterval),
		}},
	})
}

// blanket assigns ALLOW_ALL or DENY_ALL for ttl.
func blanket(id *rlqspb.BucketId, rule typev3.RateLimitStrategy_BlanketRule, ttl time.Duration) *action {
	return assignment(id, ttl, &typev3.RateLimitStrategy{
		Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: rule},
	})
}

// abandon tells Envoy to drop the bucket: its next request starts it anew.
func abandon(id *rlqspb.BucketId) *action {
	return &action{
		BucketId: id,
		BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction_{
			AbandonAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction{},
		},
	}
}
