package dynamo_test

import (
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/internal/dynamotest/rig"
)

// The errors tests make the fake DynamoDB answer with, and the one way to
// make it fail an operation (internal/dynamotest/rig).
var (
	serverError         = rig.ServerError
	transactionCanceled = rig.TransactionCanceled
	failOn              = rig.FailOn
)

// throttled is DynamoDB throttling a call.
func throttled() error {
	return &types.ProvisionedThroughputExceededException{Message: new(string)}
}

// failIf is err when cond holds, else nil.
func failIf(cond bool, err error) error {
	if cond {
		return err
	}
	return nil
}
