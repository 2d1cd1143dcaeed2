package dynamotest

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Fake is a hand-written in-memory stand-in for the DynamoDB calls the store
// makes: one table of items keyed by PK and SK, the expression subset the
// store writes (SET of a value or of if_not_exists(path, value), ADD,
// REMOVE; =, <=,
// >=, BETWEEN, AND, OR, attribute_exists,
// attribute_not_exists, begins_with), ALL_NEW and ALL_OLD return values,
// transactions with cancellation reasons, queries on the table and GSI1,
// scans (paged, filtered, projected) and batch writes.
// It counts calls by operation and can inject failures. Safe for concurrent
// use. SetOptions adds DynamoDB's latencies, its transaction conflicts and
// its per-partition throughput; a new Fake has none of them.
type Fake struct {
	mu     sync.Mutex
	tables map[string]map[string]map[string]types.AttributeValue // table → PK\x00SK → item
	descs  map[string]*types.TableDescription                    // table → what DescribeTable answers
	calls  map[string]int
	// Fail, when set, is asked before every call with the call's context; a
	// non-nil error is returned instead of running the call (Fail may block
	// until ctx is done to play a hung backend).
	Fail func(ctx context.Context, op string) error
	// failItem, when set, is asked before every UpdateItem and GetItem with
	// the item's partition key (see SetFailItem).
	failItem func(op, pk string) error
	// lostItem, when set, is asked after every UpdateItem that applied,
	// with the item's partition key (see SetLostItem).
	lostItem func(pk string) error

	model   Options            // what of DynamoDB it models (SetOptions)
	rng     *rand.Rand         // the latency draws
	pending map[string]*txn    // item → the transaction in flight on it
	buckets map[string]*bucket // partition and kind → its throughput
	layouts map[string]*layout // table → its partitions (Options.Partitions)
	used    Capacity           // what it billed (Consumed)
	thawAt  time.Time          // calls wait until then (Freeze)
}

// SetLostItem makes an UpdateItem that applied ask lost, with the item's
// partition key: a non-nil error is returned instead of the answer, as a
// write that landed and whose answer was lost.
func (f *Fake) SetLostItem(lost func(pk string) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lostItem = lost
}

// SetFailItem makes UpdateItem and GetItem calls ask fail, with the item's
// partition key, before they run: a non-nil error is returned instead.
func (f *Fake) SetFailItem(fail func(op, pk string) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failItem = fail
}

func (f *Fake) enterItem(op string, key map[string]types.AttributeValue) error {
	f.mu.Lock()
	fail := f.failItem
	f.mu.Unlock()
	if fail == nil {
		return nil
	}
	return fail(op, sval(key["PK"]))
}

// NewFake returns an empty Fake.
func NewFake() *Fake {
	return &Fake{tables: map[string]map[string]map[string]types.AttributeValue{}, calls: map[string]int{}}
}

// SetFail replaces Fail while calls may be running.
func (f *Fake) SetFail(fail func(ctx context.Context, op string) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Fail = fail
}

// Calls returns the number of calls of op ("UpdateItem", "BatchGetItem", …).
func (f *Fake) Calls(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

// ResetCalls zeroes the call counters.
func (f *Fake) ResetCalls() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = map[string]int{}
}

// Item returns a copy of the item of table with partition key pk and sort
// key sk, or nil: a look for the tests and the simulator, neither billed
// nor delayed.
func (f *Fake) Item(table, pk, sk string) map[string]types.AttributeValue {
	f.mu.Lock()
	defer f.mu.Unlock()
	it, ok := f.tables[table][pk+"\x00"+sk]
	if !ok {
		return nil
	}
	return clone(it)
}

// Items returns a copy of every item of table.
func (f *Fake) Items(table string) []map[string]types.AttributeValue {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []map[string]types.AttributeValue
	keys := make([]string, 0, len(f.tables[table]))
	for k := range f.tables[table] {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out = append(out, clone(f.tables[table][k]))
	}
	return out
}

func (f *Fake) enter(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	f.calls[op]++
	fail := f.Fail
	f.mu.Unlock()
	if err := f.thaw(ctx); err != nil {
		return err
	}
	if fail != nil {
		return fail(ctx, op)
	}
	return nil
}

func (f *Fake) table(name *string) (map[string]map[string]types.AttributeValue, error) {
	t, ok := f.tables[aws.ToString(name)]
	if !ok {
		return nil, &types.ResourceNotFoundException{Message: aws.String("table not found: " + aws.ToString(name))}
	}
	return t, nil
}

func keyOf(k map[string]types.AttributeValue) string {
	return sval(k["PK"]) + "\x00" + sval(k["SK"])
}

func sval(av types.AttributeValue) string {
	if s, ok := av.(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}

func clone(item map[string]types.AttributeValue) map[string]types.AttributeValue {
	if item == nil {
		return nil
	}
	out := make(map[string]types.AttributeValue, len(item))
	for k, v := range item {
		out[k] = v
	}
	return out
}

// ItemSize returns an item's size as DynamoDB bills it: the UTF-8 bytes of
// every attribute name and string value, about one byte per two digits of a
// number plus one, one byte for a boolean.
func ItemSize(item map[string]types.AttributeValue) int {
	n := 0
	for name, av := range item {
		n += len(name)
		switch v := av.(type) {
		case *types.AttributeValueMemberS:
			n += len(v.Value)
		case *types.AttributeValueMemberN:
			digits := len(strings.TrimLeft(v.Value, "-+0"))
			n += (digits+1)/2 + 1
		case *types.AttributeValueMemberBOOL:
			n++
		default:
			n += 8
		}
	}
	return n
}

// writeUnits is what a write of new over old costs: one unit per started KB
// of the larger of the two images.
func writeUnits(old, item map[string]types.AttributeValue) float64 {
	size := max(ItemSize(old), ItemSize(item))
	return float64(max(1, (size+1023)/1024))
}

func wcu(n float64) *types.ConsumedCapacity {
	return &types.ConsumedCapacity{CapacityUnits: aws.Float64(n)}
}

// CreateTable implements API.
func (f *Fake) CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, _ ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error) {
	if err := f.enter(ctx, "CreateTable"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.tables[aws.ToString(in.TableName)]; ok {
		return nil, &types.ResourceInUseException{Message: aws.String("table exists")}
	}
	f.tables[aws.ToString(in.TableName)] = map[string]map[string]types.AttributeValue{}
	desc := &types.TableDescription{
		TableName: in.TableName, TableStatus: types.TableStatusActive,
		AttributeDefinitions: in.AttributeDefinitions, KeySchema: in.KeySchema,
	}
	for _, g := range in.GlobalSecondaryIndexes {
		desc.GlobalSecondaryIndexes = append(desc.GlobalSecondaryIndexes, types.GlobalSecondaryIndexDescription{
			IndexName: g.IndexName, KeySchema: g.KeySchema, Projection: g.Projection, IndexStatus: types.IndexStatusActive,
		})
	}
	if w := in.WarmThroughput; w != nil {
		desc.WarmThroughput = &types.TableWarmThroughputDescription{
			ReadUnitsPerSecond: w.ReadUnitsPerSecond, WriteUnitsPerSecond: w.WriteUnitsPerSecond,
			Status: types.TableStatusActive,
		}
	}
	if f.descs == nil {
		f.descs = map[string]*types.TableDescription{}
	}
	f.descs[aws.ToString(in.TableName)] = desc
	return &dynamodb.CreateTableOutput{}, nil
}

// DescribeTable implements API.
func (f *Fake) DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, _ ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	if err := f.enter(ctx, "DescribeTable"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.table(in.TableName); err != nil {
		return nil, err
	}
	// The table as CreateTable made it (key schema, GSI1 included).
	desc := *f.descs[aws.ToString(in.TableName)]
	return &dynamodb.DescribeTableOutput{Table: &desc}, nil
}

// UpdateTimeToLive implements API.
func (f *Fake) UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error) {
	if err := f.enter(ctx, "UpdateTimeToLive"); err != nil {
		return nil, err
	}
	return &dynamodb.UpdateTimeToLiveOutput{}, nil
}

// GetItem implements API.
func (f *Fake) GetItem(ctx context.Context, in *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if err := f.enter(ctx, "GetItem"); err != nil {
		return nil, err
	}
	if err := f.enterItem("GetItem", in.Key); err != nil {
		return nil, err
	}
	var out *dynamodb.GetItemOutput
	err := f.call(ctx, readCall, func() error {
		t, err := f.table(in.TableName)
		if err != nil {
			return err
		}
		item := t[keyOf(in.Key)]
		units := readUnits(item, aws.ToBool(in.ConsistentRead))
		if err := f.takeOne(readCall, in.TableName, in.Key, units); err != nil {
			return err
		}
		out = &dynamodb.GetItemOutput{Item: clone(item), ConsumedCapacity: wcu(units)}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// BatchGetItem implements API. Under Options.Throughput a key whose
// partition is out of read units is left in UnprocessedKeys, and a call
// that read none is throttled, as DynamoDB answers.
func (f *Fake) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	if err := f.enter(ctx, "BatchGetItem"); err != nil {
		return nil, err
	}
	var out *dynamodb.BatchGetItemOutput
	err := f.call(ctx, readCall, func() error {
		var err error
		out, err = f.batchGetLocked(in)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (f *Fake) batchGetLocked(in *dynamodb.BatchGetItemInput) (*dynamodb.BatchGetItemOutput, error) {
	out := &dynamodb.BatchGetItemOutput{Responses: map[string][]map[string]types.AttributeValue{}}
	var throttled error
	read := 0
	for name, ka := range in.RequestItems {
		t, err := f.table(aws.String(name))
		if err != nil {
			return nil, err
		}
		n := 0
		for _, k := range ka.Keys {
			item, ok := t[keyOf(k)]
			if err := f.takeOne(readCall, aws.String(name), k, readUnits(item, aws.ToBool(ka.ConsistentRead))); err != nil {
				throttled = err
				left := out.UnprocessedKeys[name]
				left.Keys, left.ConsistentRead = append(left.Keys, k), ka.ConsistentRead
				left.ProjectionExpression, left.ExpressionAttributeNames = ka.ProjectionExpression, ka.ExpressionAttributeNames
				if out.UnprocessedKeys == nil {
					out.UnprocessedKeys = map[string]types.KeysAndAttributes{}
				}
				out.UnprocessedKeys[name] = left
				continue
			}
			n++
			if ok {
				out.Responses[name] = append(out.Responses[name], clone(item))
			}
		}
		read += n
		out.ConsumedCapacity = append(out.ConsumedCapacity, types.ConsumedCapacity{TableName: aws.String(name), CapacityUnits: aws.Float64(float64(n))})
	}
	if read == 0 && throttled != nil {
		return nil, throttled
	}
	return out, nil
}

// PutItem implements API.
func (f *Fake) PutItem(ctx context.Context, in *dynamodb.PutItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if err := f.enter(ctx, "PutItem"); err != nil {
		return nil, err
	}
	var units float64
	err := f.single(ctx, in.TableName, in.Item, func() (bool, error) {
		t, err := f.table(in.TableName)
		if err != nil {
			return false, err
		}
		k := keyOf(in.Item)
		ok, err := evalCond(in.ConditionExpression, t[k], in.ExpressionAttributeNames, in.ExpressionAttributeValues)
		if err != nil {
			return false, err
		}
		units = writeUnits(t[k], in.Item)
		if err := f.takeOne(writeCall, in.TableName, in.Item, units); err != nil {
			return false, err
		}
		if !ok {
			return false, &types.ConditionalCheckFailedException{Message: aws.String("condition failed")}
		}
		t[k] = clone(in.Item)
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	return &dynamodb.PutItemOutput{ConsumedCapacity: wcu(units)}, nil
}

// DeleteItem implements API.
func (f *Fake) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	if err := f.enter(ctx, "DeleteItem"); err != nil {
		return nil, err
	}
	var units float64
	err := f.single(ctx, in.TableName, in.Key, func() (bool, error) {
		t, err := f.table(in.TableName)
		if err != nil {
			return false, err
		}
		k := keyOf(in.Key)
		old, ok := t[k]
		units = writeUnits(old, nil)
		if err := f.takeOne(writeCall, in.TableName, in.Key, units); err != nil {
			return false, err
		}
		delete(t, k)
		return ok, nil
	})
	if err != nil {
		return nil, err
	}
	return &dynamodb.DeleteItemOutput{ConsumedCapacity: wcu(units)}, nil
}

// UpdateItem implements API.
func (f *Fake) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if err := f.enter(ctx, "UpdateItem"); err != nil {
		return nil, err
	}
	if err := f.enterItem("UpdateItem", in.Key); err != nil {
		return nil, err
	}
	var out *dynamodb.UpdateItemOutput
	err := f.single(ctx, in.TableName, in.Key, func() (landed bool, err error) {
		out, landed, err = f.updateLocked(in)
		return landed, err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// updateLocked runs in under f's lock; landed says whether it wrote (an
// error of lostItem follows a write that landed).
func (f *Fake) updateLocked(in *dynamodb.UpdateItemInput) (out *dynamodb.UpdateItemOutput, landed bool, err error) {
	t, err := f.table(in.TableName)
	if err != nil {
		return nil, false, err
	}
	k := keyOf(in.Key)
	old := t[k]
	ok, err := evalCond(in.ConditionExpression, old, in.ExpressionAttributeNames, in.ExpressionAttributeValues)
	if err != nil {
		return nil, false, err
	}
	var item map[string]types.AttributeValue
	if ok {
		if item, err = applyUpdate(old, in.Key, in.UpdateExpression, in.ExpressionAttributeNames, in.ExpressionAttributeValues); err != nil {
			return nil, false, err
		}
	}
	if err := f.takeOne(writeCall, in.TableName, in.Key, writeUnits(old, item)); err != nil {
		return nil, false, err
	}
	if !ok {
		e := &types.ConditionalCheckFailedException{Message: aws.String("condition failed")}
		if in.ReturnValuesOnConditionCheckFailure == types.ReturnValuesOnConditionCheckFailureAllOld {
			e.Item = clone(old)
		}
		return nil, false, e
	}
	t[k] = item
	if f.lostItem != nil {
		if err := f.lostItem(sval(in.Key["PK"])); err != nil {
			return nil, true, err
		}
	}
	out = &dynamodb.UpdateItemOutput{ConsumedCapacity: wcu(writeUnits(old, item))}
	if in.ReturnValues == types.ReturnValueAllNew {
		out.Attributes = clone(item)
	}
	return out, true, nil
}

// Query implements API: the table by PK (with an optional begins_with on
// SK), or GSI1 by GSI1PK. It takes a read's latency and no read units.
func (f *Fake) Query(ctx context.Context, in *dynamodb.QueryInput, _ ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	if err := f.enter(ctx, "Query"); err != nil {
		return nil, err
	}
	var out *dynamodb.QueryOutput
	err := f.call(ctx, readCall, func() error {
		var err error
		out, err = f.queryLocked(in)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (f *Fake) queryLocked(in *dynamodb.QueryInput) (*dynamodb.QueryOutput, error) {
	t, err := f.table(in.TableName)
	if err != nil {
		return nil, err
	}
	pkName, skName := "PK", "SK"
	if idx := aws.ToString(in.IndexName); idx != "" {
		pkName, skName = idx+"PK", idx+"SK"
	}
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return sval(t[keys[i]][skName]) < sval(t[keys[j]][skName]) })
	out := &dynamodb.QueryOutput{}
	for _, k := range keys {
		item := t[k]
		if _, ok := item[pkName]; !ok {
			continue
		}
		view := clone(item)
		view["PK"], view["SK"] = item[pkName], item[skName]
		ok, err := evalCond(in.KeyConditionExpression, view, in.ExpressionAttributeNames, in.ExpressionAttributeValues)
		if err != nil {
			return nil, err
		}
		if ok {
			out.Items = append(out.Items, clone(item))
		}
	}
	out.Count = int32(len(out.Items))
	return out, nil
}

// ---- expressions ----

func tokenize(s string) []string {
	var toks []string
	cur := strings.Builder{}
	flush := func() {
		if cur.Len() > 0 {
			toks = append(toks, cur.String())
			cur.Reset()
		}
	}
	for _, r := range s {
		switch r {
		case ' ', '\t', '\n':
			flush()
		case '(', ')', ',':
			flush()
			toks = append(toks, string(r))
		default:
			cur.WriteRune(r)
		}
	}
	flush()
	return toks
}

type condParser struct {
	toks   []string
	pos    int
	item   map[string]types.AttributeValue
	names  map[string]string
	values map[string]types.AttributeValue
}

func evalCond(expr *string, item map[string]types.AttributeValue, names map[string]string, values map[string]types.AttributeValue) (bool, error) {
	if expr == nil || *expr == "" {
		return true, nil
	}
	p := &condParser{toks: tokenize(*expr), item: item, names: names, values: values}
	v, err := p.or()
	if err != nil {
		return false, err
	}
	if p.pos != len(p.toks) {
		return false, fmt.Errorf("fake: trailing tokens in %q", *expr)
	}
	return v, nil
}

func (p *condParser) peek() string {
	if p.pos < len(p.toks) {
		return p.toks[p.pos]
	}
	return ""
}

func (p *condParser) next() string { t := p.peek(); p.pos++; return t }

func (p *condParser) or() (bool, error) {
	v, err := p.and()
	for err == nil && p.peek() == "OR" {
		p.next()
		var w bool
		w, err = p.and()
		v = v || w
	}
	return v, err
}

func (p *condParser) and() (bool, error) {
	v, err := p.prim()
	for err == nil && p.peek() == "AND" {
		p.next()
		var w bool
		w, err = p.prim()
		v = v && w
	}
	return v, err
}

func (p *condParser) operand(tok string) (types.AttributeValue, error) {
	switch {
	case strings.HasPrefix(tok, ":"):
		v, ok := p.values[tok]
		if !ok {
			return nil, fmt.Errorf("fake: no value %s", tok)
		}
		return v, nil
	case strings.HasPrefix(tok, "#"):
		n, ok := p.names[tok]
		if !ok {
			return nil, fmt.Errorf("fake: no name %s", tok)
		}
		return p.item[n], nil
	default:
		return p.item[tok], nil
	}
}

func (p *condParser) prim() (bool, error) {
	t := p.next()
	switch t {
	case "(":
		v, err := p.or()
		if err != nil {
			return false, err
		}
		if p.next() != ")" {
			return false, errors.New("fake: missing )")
		}
		return v, nil
	case "attribute_exists", "attribute_not_exists", "begins_with":
		if p.next() != "(" {
			return false, errors.New("fake: missing (")
		}
		a, err := p.operand(p.next())
		if err != nil {
			return false, err
		}
		var res bool
		switch t {
		case "attribute_exists":
			res = a != nil
		case "attribute_not_exists":
			res = a == nil
		default:
			if p.next() != "," {
				return false, errors.New("fake: missing ,")
			}
			b, err := p.operand(p.next())
			if err != nil {
				return false, err
			}
			res = a != nil && strings.HasPrefix(sval(a), sval(b))
		}
		if p.next() != ")" {
			return false, errors.New("fake: missing )")
		}
		return res, nil
	}
	a, err := p.operand(t)
	if err != nil {
		return false, err
	}
	op := p.next()
	b, err := p.operand(p.next())
	if err != nil {
		return false, err
	}
	if op == "BETWEEN" {
		if p.next() != "AND" {
			return false, errors.New("fake: BETWEEN without AND")
		}
		c, err := p.operand(p.next())
		if err != nil {
			return false, err
		}
		return a != nil && cmp(a, b) >= 0 && cmp(a, c) <= 0, nil
	}
	if a == nil || b == nil {
		return op == "<>", nil
	}
	c := cmp(a, b)
	switch op {
	case "=":
		return c == 0, nil
	case "<>":
		return c != 0, nil
	case "<":
		return c < 0, nil
	case "<=":
		return c <= 0, nil
	case ">":
		return c > 0, nil
	case ">=":
		return c >= 0, nil
	}
	return false, fmt.Errorf("fake: unknown operator %q", op)
}

// cmp compares numbers numerically and anything else as strings (and
// numbers before strings).
func cmp(a, b types.AttributeValue) int {
	an, aok := a.(*types.AttributeValueMemberN)
	bn, bok := b.(*types.AttributeValueMemberN)
	if aok && bok {
		x, _ := new(big.Int).SetString(an.Value, 10)
		y, _ := new(big.Int).SetString(bn.Value, 10)
		if x == nil || y == nil {
			return strings.Compare(an.Value, bn.Value)
		}
		return x.Cmp(y)
	}
	if aok != bok {
		if aok {
			return -1
		}
		return 1
	}
	if ab, ok := a.(*types.AttributeValueMemberBOOL); ok {
		if bb, ok := b.(*types.AttributeValueMemberBOOL); ok && ab.Value == bb.Value {
			return 0
		}
		return 1
	}
	return strings.Compare(sval(a), sval(b))
}

func applyUpdate(old, key map[string]types.AttributeValue, expr *string, names map[string]string, values map[string]types.AttributeValue) (map[string]types.AttributeValue, error) {
	item := clone(old)
	if item == nil {
		item = clone(key)
	}
	if expr == nil {
		return item, nil
	}
	toks := tokenize(*expr)
	name := func(t string) (string, error) {
		if strings.HasPrefix(t, "#") {
			n, ok := names[t]
			if !ok {
				return "", fmt.Errorf("fake: no name %s", t)
			}
			return n, nil
		}
		return t, nil
	}
	mode := ""
	for i := 0; i < len(toks); {
		switch toks[i] {
		case "SET", "ADD", "REMOVE":
			mode = toks[i]
			i++
			continue
		case ",":
			i++
			continue
		}
		n, err := name(toks[i])
		if err != nil {
			return nil, err
		}
		switch mode {
		case "SET":
			if i+2 >= len(toks) || toks[i+1] != "=" {
				return nil, fmt.Errorf("fake: bad SET in %q", *expr)
			}
			if toks[i+2] == "if_not_exists" {
				// if_not_exists(path, :v): the path's value before the
				// update, as DynamoDB reads every operand, else :v.
				if i+7 >= len(toks) || toks[i+3] != "(" || toks[i+5] != "," || toks[i+7] != ")" {
					return nil, fmt.Errorf("fake: bad if_not_exists in %q", *expr)
				}
				from, err := name(toks[i+4])
				if err != nil {
					return nil, err
				}
				v, ok := values[toks[i+6]]
				if !ok {
					return nil, fmt.Errorf("fake: no value %s", toks[i+6])
				}
				if cur, ok := old[from]; ok {
					v = cur
				}
				item[n] = v
				i += 8
				continue
			}
			v, ok := values[toks[i+2]]
			if !ok {
				return nil, fmt.Errorf("fake: no value %s", toks[i+2])
			}
			item[n] = v
			i += 3
		case "ADD":
			if i+1 >= len(toks) {
				return nil, fmt.Errorf("fake: bad ADD in %q", *expr)
			}
			v, ok := values[toks[i+1]].(*types.AttributeValueMemberN)
			if !ok {
				return nil, fmt.Errorf("fake: ADD needs a number in %q", *expr)
			}
			d, ok := new(big.Int).SetString(v.Value, 10)
			if !ok {
				return nil, fmt.Errorf("fake: ADD needs a whole number, got %q", v.Value)
			}
			cur := new(big.Int)
			if c, ok := item[n].(*types.AttributeValueMemberN); ok {
				cur.SetString(c.Value, 10)
			}
			item[n] = &types.AttributeValueMemberN{Value: cur.Add(cur, d).String()}
			i += 2
		case "REMOVE":
			delete(item, n)
			i++
		default:
			return nil, fmt.Errorf("fake: unsupported update %q", *expr)
		}
	}
	return item, nil
}
