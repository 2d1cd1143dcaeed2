package tracing

import (
	"context"
	"errors"
	"sync"

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

// Attributes and events that tie a DynamoDB call to the decisions it
// serves.
const (
	attrDecisions  = "ratelimit.decisions"   // on a call span: decisions it served
	eventShared    = "ratelimit.shared_call" // on a decision's span: a call that served it and others
	attrCallName   = "ratelimit.call.name"
	attrCallTrace  = "ratelimit.call.trace_id"
	attrCallSpanID = "ratelimit.call.span_id"
)

// served is what CallContext records of the decisions a store call serves
// and of the spans started on its context so far (one call context may
// carry several DynamoDB requests: a write retried after a failed
// condition, a read retried after throttling).
type served struct {
	parent trace.SpanContext // the span the call's spans are children of

	mu     sync.Mutex
	n      int               // decisions served
	others []context.Context // the decisions, but the parent's, that have a span
	spans  []callSpan
}

type callSpan struct {
	name string
	span trace.Span
}

type servedKey struct{}

// CallContext is the DynamoDB store's call-context hook
// (dynamo.WithCallContext): a call the store makes on its own (a batch
// write, a shared read, a give-back) becomes a child of the span of the
// first decision it serves, links to the spans of the others (the ones
// that join a read under way included, see dynamo.WithCallJoin), and
// records how many it serves (ratelimit.decisions). Each linked decision's
// span gets a ratelimit.shared_call event naming the call's span. When the
// first decision is not sampled, the first sampled one is the parent
// instead, so that a sampled decision's trace holds the call. Only values
// are added: the call keeps the store's deadline and cancellation. Without
// a Provider the spans it refers to are not recording and nothing is
// exported.
func CallContext(call context.Context, decisions []context.Context) context.Context {
	sv := &served{n: len(decisions)}
	parent := -1
	for i, d := range decisions {
		sc := trace.SpanContextFromContext(d)
		if sc.IsValid() && (parent < 0 || sc.IsSampled() && !sv.parent.IsSampled()) {
			parent, sv.parent = i, sc
		}
	}
	for i, d := range decisions {
		if i != parent && trace.SpanContextFromContext(d).IsValid() {
			sv.others = append(sv.others, d)
		}
	}
	if sv.parent.IsValid() {
		call = trace.ContextWithSpanContext(call, sv.parent)
	}
	return dynamo.WithCallJoin(context.WithValue(call, servedKey{}, sv), sv.join)
}

// join records a decision that joined the call after it started: a link
// from each call span still running and an event on the decision's span
// for each call span so far.
func (sv *served) join(decision context.Context) {
	sc := trace.SpanContextFromContext(decision)
	sv.mu.Lock()
	defer sv.mu.Unlock()
	sv.n++
	if sc.IsValid() {
		sv.others = append(sv.others, decision)
	}
	for _, c := range sv.spans {
		c.span.SetAttributes(attribute.Int(attrDecisions, sv.n))
		if sc.IsValid() {
			c.span.AddLink(trace.Link{SpanContext: sc})
			sharedCall(decision, c.name, c.span.SpanContext())
		}
	}
}

// startServed starts the span of a call made for the decisions sv records:
// a child of the parent's span, linked to the others, each of which gets an
// event naming it.
func (d *tracedDynamo) startServed(ctx context.Context, sv *served, name string, opts []trace.SpanStartOption, attrs []attribute.KeyValue) (context.Context, trace.Span) {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	links := make([]trace.Link, len(sv.others))
	for i, o := range sv.others {
		links[i] = trace.Link{SpanContext: trace.SpanContextFromContext(o)}
	}
	attrs = append(attrs, attribute.Int(attrDecisions, sv.n))
	ctx, span := d.tracer.Start(ctx, name, append(opts, trace.WithLinks(links...), trace.WithAttributes(attrs...))...)
	sv.spans = append(sv.spans, callSpan{name: name, span: span})
	for _, o := range sv.others {
		sharedCall(o, name, span.SpanContext())
	}
	return ctx, span
}

// sharedCall adds to the span of decision an event naming call, a sampled
// call span that served it (and others) but is not its child.
func sharedCall(decision context.Context, name string, call trace.SpanContext) {
	if !call.IsSampled() {
		return
	}
	trace.SpanFromContext(decision).AddEvent(eventShared, trace.WithAttributes(
		attribute.String(attrCallName, name),
		attribute.String(attrCallTrace, call.TraceID().String()),
		attribute.String(attrCallSpanID, call.SpanID().String())))
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
		return d.startServed(ctx, sv, "DynamoDB."+op, opts, attrs)
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
