package main

import (
	"context"
	"math"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/internal/dynamotest"
)

// warmAPI is the fake with CreateTable asking for a warm throughput of
// writes and reads units a second, where either is set: the table
// pre-warmed at creation, as CreateTable's WarmThroughput does.
type warmAPI struct {
	*dynamotest.Fake
	writes, reads float64
}

// CreateTable creates the table pre-warmed.
func (w warmAPI) CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, o ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error) {
	if w.writes > 0 || w.reads > 0 {
		c := *in
		c.WarmThroughput = &types.WarmThroughput{}
		if w.writes > 0 {
			c.WarmThroughput.WriteUnitsPerSecond = aws.Int64(int64(math.Ceil(w.writes)))
		}
		if w.reads > 0 {
			c.WarmThroughput.ReadUnitsPerSecond = aws.Int64(int64(math.Ceil(w.reads)))
		}
		in = &c
	}
	return w.Fake.CreateTable(ctx, in, o...)
}
