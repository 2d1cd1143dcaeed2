package tracing

import (
	"context"
	"errors"
	"maps"
	"reflect"
	"slices"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/dynalimit/dynalimit/pkg/dynamo"
)

// DynamoDB returns a DynamoDB client option that makes every call of the
// client a client span named "DynamoDB.<Operation>" with the OpenTelemetry
// attributes of AWS calls (rpc.system aws-api, rpc.service DynamoDB,
// rpc.method, db.system.name aws.dynamodb, aws.dynamodb.table_names). A
// failed conditional write is an answer, not a failure: it is recorded as
// aws.dynamodb.condition_failed and leaves the span's status unset; any
// other error marks the span failed. It hangs one middleware at the front
// of the SDK's initialize step, so every operation of the client is traced,
// those the store does not call included. Pass it to dynamo.NewClient or
// dynamodb.NewFromConfig, or to one call. A nil p adds nothing.
func DynamoDB(p *Provider) func(*dynamodb.Options) {
	if p == nil {
		return func(*dynamodb.Options) {}
	}
	d := &tracedDynamo{tracer: p.tracer}
	mw := middleware.InitializeMiddlewareFunc("ratelimit.tracing", d.handle)
	return func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(mw, middleware.Before)
		})
	}
}

// tracedDynamo starts the spans of DynamoDB calls.
type tracedDynamo struct {
	tracer trace.Tracer
}

// handle runs one call inside its span.
func (d *tracedDynamo) handle(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
	ctx, span := d.start(ctx, middleware.GetOperationName(ctx), in.Parameters)
	out, md, err := next.HandleInitialize(ctx, in)
	end(span, err)
	return out, md, err
}

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

func (d *tracedDynamo) start(ctx context.Context, op string, params any) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}
	attrs := []attribute.KeyValue{
		attribute.String("rpc.system", "aws-api"),
		attribute.String("rpc.service", "DynamoDB"),
		attribute.String("rpc.method", op),
		attribute.String("db.system.name", "aws.dynamodb"),
		attribute.String("db.operation.name", op),
	}
	attrs = append(attrs, inputAttributes(params)...)
	if sv, ok := ctx.Value(servedKey{}).(*served); ok {
		return d.startServed(ctx, sv, "DynamoDB."+op, opts, attrs)
	}
	return d.tracer.Start(ctx, "DynamoDB."+op, append(opts, trace.WithAttributes(attrs...))...)
}

// inputAttributes returns what a call's input tells of where it goes: the
// tables it names (aws.dynamodb.table_names), the index a query reads
// (aws.dynamodb.index_name) and the items a transaction writes
// (aws.dynamodb.transact_items). The few inputs that name their tables
// other than by a TableName field are listed; every other input's
// TableName is read by name, so that an operation added later is traced
// with its table.
func inputAttributes(params any) []attribute.KeyValue {
	var attrs []attribute.KeyValue
	switch in := params.(type) {
	case *dynamodb.BatchGetItemInput:
		return []attribute.KeyValue{attribute.StringSlice("aws.dynamodb.table_names", slices.Collect(maps.Keys(in.RequestItems)))}
	case *dynamodb.BatchWriteItemInput:
		return []attribute.KeyValue{attribute.StringSlice("aws.dynamodb.table_names", slices.Collect(maps.Keys(in.RequestItems)))}
	case *dynamodb.TransactWriteItemsInput:
		return []attribute.KeyValue{attribute.Int("aws.dynamodb.transact_items", len(in.TransactItems))}
	case *dynamodb.QueryInput:
		if in.IndexName != nil {
			attrs = append(attrs, attribute.String("aws.dynamodb.index_name", aws.ToString(in.IndexName)))
		}
	}
	if table, ok := tableName(params); ok {
		attrs = append(attrs, attribute.StringSlice("aws.dynamodb.table_names", []string{table}))
	}
	return attrs
}

// tableName reads the TableName field of an operation's input.
func tableName(params any) (string, bool) {
	v := reflect.ValueOf(params)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return "", false
	}
	f := v.Elem().FieldByName("TableName")
	if !f.IsValid() {
		return "", false
	}
	name, ok := f.Interface().(*string)
	return aws.ToString(name), ok
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
