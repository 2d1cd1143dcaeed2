package tracing

import (
	"context"
	"errors"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/dynalimit/dynalimit/pkg/dynamo"
)

// DynamoDB wraps api so that every call is a client span named
// "DynamoDB.<Operation>" with the OpenTelemetry attributes of AWS calls
// (rpc.system aws-api, rpc.service DynamoDB, rpc.method, db.system.name
// aws.dynamodb, aws.dynamodb.table_names). A failed conditional write is an
// answer, not a failure: it is recorded as aws.dynamodb.condition_failed
// and leaves the span's status unset; any other error marks the span
// failed. A nil p returns api unchanged.
func DynamoDB(api dynamo.API, p *Provider) dynamo.API {
	if p == nil {
		return api
	}
	return &tracedDynamo{api: api, tracer: p.tracer}
}

type tracedDynamo struct {
	api    dynamo.API
	tracer trace.Tracer
}

var _ dynamo.API = (*tracedDynamo)(nil)

// served is what CallContext records of the decisions a store call serves.
type served struct {
	links []trace.Link // every decision but the one the call is a child of
	n     int          // decisions served
}

type servedKey struct{}

// CallContext is the DynamoDB store's call-context hook
// (dynamo.WithCallContext): a call the store makes on its own (a batch
// write, a shared read, a give-back) becomes a child of the span of the
// first decision it serves, links to the spans of the others, and records
// how many it serves (ratelimit.decisions). Without a Provider the spans it
// refers to are not recording and nothing is exported.
func CallContext(call context.Context, decisions []context.Context) context.Context {
	var parent trace.SpanContext
	sv := &served{n: len(decisions)}
	for _, d := range decisions {
		sc := trace.SpanContextFromContext(d)
		switch {
		case !sc.IsValid():
		case !parent.IsValid():
			parent = sc
		default:
			sv.links = append(sv.links, trace.Link{SpanContext: sc})
		}
	}
	if parent.IsValid() {
		call = trace.ContextWithSpanContext(call, parent)
	}
	return context.WithValue(call, servedKey{}, sv)
}

func (d *tracedDynamo) start(ctx context.Context, op string, tables ...string) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}
	attrs := []attribute.KeyValue{
		attribute.String("rpc.system", "aws-api"),
		attribute.String("rpc.service", "DynamoDB"),
		attribute.String("rpc.method", op),
		attribute.String("db.system.name", "aws.dynamodb"),
		attribute.String("db.operation.name", op),
	}
	if len(tables) > 0 {
		attrs = append(attrs, attribute.StringSlice("aws.dynamodb.table_names", tables))
	}
	if sv, ok := ctx.Value(servedKey{}).(*served); ok {
		attrs = append(attrs, attribute.Int("ratelimit.decisions", sv.n))
		if len(sv.links) > 0 {
			opts = append(opts, trace.WithLinks(sv.links...))
		}
	}
	return d.tracer.Start(ctx, "DynamoDB."+op, append(opts, trace.WithAttributes(attrs...))...)
}

// end records err on span and ends it.
func end(span trace.Span, err error) {
	defer span.End()
	if err == nil {
		return
	}
	if conditionFailed(err) {
		span.SetAttributes(attribute.Bool("aws.dynamodb.condition_failed", true))
		return
	}
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}

func conditionFailed(err error) bool {
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return true
	}
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) {
		for _, r := range tce.CancellationReasons {
			if aws.ToString(r.Code) == "ConditionalCheckFailed" {
				return true
			}
		}
	}
	return false
}

func (d *tracedDynamo) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	ctx, span := d.start(ctx, "GetItem", aws.ToString(in.TableName))
	out, err := d.api.GetItem(ctx, in, o...)
	end(span, err)
	return out, err
}

func (d *tracedDynamo) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	ctx, span := d.start(ctx, "PutItem", aws.ToString(in.TableName))
	out, err := d.api.PutItem(ctx, in, o...)
	end(span, err)
	return out, err
}

func (d *tracedDynamo) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	ctx, span := d.start(ctx, "UpdateItem", aws.ToString(in.TableName))
	out, err := d.api.UpdateItem(ctx, in, o...)
	end(span, err)
	return out, err
}

func (d *tracedDynamo) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	ctx, span := d.start(ctx, "DeleteItem", aws.ToString(in.TableName))
	out, err := d.api.DeleteItem(ctx, in, o...)
	end(span, err)
	return out, err
}

func (d *tracedDynamo) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	tables := make([]string, 0, len(in.RequestItems))
	for t := range in.RequestItems {
		tables = append(tables, t)
	}
	ctx, span := d.start(ctx, "BatchGetItem", tables...)
	out, err := d.api.BatchGetItem(ctx, in, o...)
	end(span, err)
	return out, err
}

func (d *tracedDynamo) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	ctx, span := d.start(ctx, "TransactWriteItems")
	span.SetAttributes(attribute.Int("aws.dynamodb.transact_items", len(in.TransactItems)))
	out, err := d.api.TransactWriteItems(ctx, in, o...)
	end(span, err)
	return out, err
}

func (d *tracedDynamo) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	ctx, span := d.start(ctx, "Query", aws.ToString(in.TableName))
	if in.IndexName != nil {
		span.SetAttributes(attribute.String("aws.dynamodb.index_name", aws.ToString(in.IndexName)))
	}
	out, err := d.api.Query(ctx, in, o...)
	end(span, err)
	return out, err
}

func (d *tracedDynamo) CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, o ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error) {
	ctx, span := d.start(ctx, "CreateTable", aws.ToString(in.TableName))
	out, err := d.api.CreateTable(ctx, in, o...)
	end(span, err)
	return out, err
}

func (d *tracedDynamo) DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, o ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	ctx, span := d.start(ctx, "DescribeTable", aws.ToString(in.TableName))
	out, err := d.api.DescribeTable(ctx, in, o...)
	end(span, err)
	return out, err
}

func (d *tracedDynamo) UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error) {
	ctx, span := d.start(ctx, "UpdateTimeToLive", aws.ToString(in.TableName))
	out, err := d.api.UpdateTimeToLive(ctx, in, o...)
	end(span, err)
	return out, err
}
