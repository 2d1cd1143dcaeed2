package dynamo_test

import (
	"context"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
)

// The errors tests make the fake DynamoDB answer with, and the one way to
// make it fail an operation.

// serverError is DynamoDB failing a call (HTTP 500).
func serverError() error { return &types.InternalServerError{Message: new(string)} }

// throttled is DynamoDB throttling a call.
func throttled() error {
	return &types.ProvisionedThroughputExceededException{Message: new(string)}
}

// transactionCanceled is a transaction DynamoDB cancelled, with one
// reason code per item.
func transactionCanceled(codes ...string) error {
	var reasons []types.CancellationReason
	for _, c := range codes {
		reasons = append(reasons, types.CancellationReason{Code: aws.String(c)})
	}
	return &types.TransactionCanceledException{Message: aws.String("cancelled"), CancellationReasons: reasons}
}

// failIf is err when cond holds, else nil.
func failIf(cond bool, err error) error {
	if cond {
		return err
	}
	return nil
}

// failOn makes f fail op with err: every call when nth is 0, else only its
// nth call (counted from 1). It replaces any failure set before.
func failOn(f *dynamotest.Fake, op string, nth int64, err error) {
	var n atomic.Int64
	f.SetFail(func(_ context.Context, o string) error {
		if o == op && (nth == 0 || n.Add(1) == nth) {
			return err
		}
		return nil
	})
}
