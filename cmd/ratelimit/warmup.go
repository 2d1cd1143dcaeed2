package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/warm"
)

// warmup is how a DynamoDB backend readies its store.
type warmup struct {
	// open opens the store; it checks the table's schema version.
	open func(context.Context) (*dynamo.Store, error)
	// options say how the store is warmed up once open.
	options warm.Options
	// window is how long an attempt may take, and how often an error is
	// logged while none succeeds (BACKEND_WARMUP_TIMEOUT).
	window time.Duration
	// explain says what to do about err when it can (admin.Explain), and
	// returns err itself otherwise.
	explain func(err error) error
	log     *logrus.Entry
}

// run opens the store into w and warms it up (warm.Run), trying
// again after a failure, with a backoff of up to 5 s, until it succeeds or
// ctx ends (then it returns nil). The first failure is logged at once, with
// what to check (explain's message when it has one, else warmupHint's);
// while no attempt has succeeded, an error is logged every window. What
// waiting cannot mend is returned, explained: a missing table
// (dynamo.ErrNoTable) or a table of another schema (dynamo.ErrSchema).
func (u warmup) run(ctx context.Context, w *warming) error {
	start := time.Now()
	u.log.WithField("timeout", u.window.String()).Info("dynamodb warm-up: health is NOT_SERVING until it is done")
	windowStart, warned := start, false
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, u.window)
		rep, err := u.once(actx, w)
		cancel()
		if err == nil {
			f := logrus.Fields{"took": time.Since(start).Round(time.Millisecond).String(), "attempts": attempt + 1, "rounds": rep.Rounds, "slowest_call_ms": millis(rep.Slowest)}
			if rep.DescribeSkipped {
				u.log.Warn("dynamodb warm-up: DescribeTable is denied, so the table's key schema was not checked (its schema version was); grant dynamodb:DescribeTable to have it checked")
			}
			u.log.WithFields(f).Info("dynamodb store ready")
			return nil
		}
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, dynamo.ErrSchema) || errors.Is(err, dynamo.ErrNoTable) {
			return fmt.Errorf("dynamodb store: %w", u.explain(err))
		}
		if !warned {
			u.log.WithError(err).WithField("check", u.hint(err)).Warn("dynamodb warm-up failed; retrying, health stays NOT_SERVING")
			warned = true
		}
		if waited := time.Since(windowStart); waited >= u.window {
			u.log.WithError(err).WithFields(logrus.Fields{"check": u.hint(err), "waited": time.Since(start).Round(time.Second).String()}).
				Error("dynamodb warm-up has not succeeded within BACKEND_WARMUP_TIMEOUT; health stays NOT_SERVING and it keeps retrying")
			windowStart = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(min(100*time.Millisecond<<min(attempt, 6), 5*time.Second)):
		}
	}
}

// once is one attempt: open the store unless an earlier attempt did, then
// warm it up.
func (u warmup) once(ctx context.Context, w *warming) (warm.Report, error) {
	st := w.opened()
	if st == nil {
		var err error
		if st, err = u.open(ctx); err != nil {
			return warm.Report{}, err
		}
		w.set(st)
	}
	return warm.Run(ctx, st.Table(), u.options)
}

// hint says what to check after err: explain's message when it has one,
// else warmupHint's.
func (u warmup) hint(err error) string {
	if e := u.explain(err); e != err { //nolint:errorlint // explain returns err itself when it has nothing to add
		return e.Error()
	}
	return warmupHint(err)
}

func millis(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(d.Microseconds()) / 1000
	}
	return out
}

// warmupHint says what to check after a failed warm-up, by the store's
// classification of the error (dynamo.Cause).
func warmupHint(err error) string {
	//nolint:errorlint // Cause returns the sentinel itself, the most specific one err wraps
	switch dynamo.Cause(err) {
	case dynamo.ErrNoTable:
		return "the table does not exist: create it with `ratelimit table create` (or your infrastructure code); check DYNAMODB_TABLE and AWS_REGION"
	case dynamo.ErrAccessDenied:
		return "the credentials are refused or lack a permission: check the principal's IAM policy (the service needs dynamodb:GetItem, BatchGetItem, UpdateItem, PutItem, TransactWriteItems, Query and DescribeTable on the table)"
	case dynamo.ErrNoCredentials:
		return "no AWS credentials were found: check the SDK's default chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, IRSA's AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE, the instance or task role)"
	case dynamo.ErrUnreachable:
		return "DynamoDB did not answer: check DYNAMODB_ENDPOINT (is DynamoDB Local running there?) or, on AWS, AWS_REGION and the network path to DynamoDB"
	case dynamo.ErrThrottled:
		return "DynamoDB throttled the warm-up: check the table's capacity"
	}
	return "check DYNAMODB_ENDPOINT, AWS_REGION, DYNAMODB_TABLE and the credentials"
}
