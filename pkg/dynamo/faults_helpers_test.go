package dynamo_test

import (
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
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

// failDoublingFromOne has f fail (a server error) every write of shard 1 of
// a bucket: a doubling of a bucket of one shard fails in its first round,
// before it writes shard 0, and the bucket stays one shard.
func failDoublingFromOne(f *dynamotest.Fake) {
	f.SetFailItem(func(op, pk string) error { return failIf(op == "UpdateItem" && isShard(pk, 1), serverError()) })
}

// isShard reports whether pk is the item of shard sh of a bucket.
func isShard(pk string, sh int) bool {
	return strings.Contains(pk, "/BUCKET#") && strings.HasSuffix(pk, "#"+strconv.Itoa(sh))
}
