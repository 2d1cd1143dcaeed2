package dynamotest

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/pkg/dynamo"
)

// operation answers one request body of DynamoDB's JSON protocol.
type operation func(ctx context.Context, body []byte) (any, error)

// operations are api's operations by the name X-Amz-Target gives them.
func operations(api dynamo.API) map[string]operation {
	return map[string]operation{
		"GetItem":            wire(api.GetItem),
		"PutItem":            wire(api.PutItem),
		"UpdateItem":         wire(api.UpdateItem),
		"DeleteItem":         wire(api.DeleteItem),
		"BatchGetItem":       wire(api.BatchGetItem),
		"TransactWriteItems": wire(api.TransactWriteItems),
		"Query":              wire(api.Query),
		"Scan":               wire(api.Scan),
		"BatchWriteItem":     wire(api.BatchWriteItem),
		"CreateTable":        wire(api.CreateTable),
		"DescribeTable":      wire(api.DescribeTable),
		"UpdateTimeToLive":   wire(api.UpdateTimeToLive),
	}
}

// wire is call over the wire: the body decoded into its input, its output
// encoded as DynamoDB answers it.
func wire[In, Out any](call func(context.Context, *In, ...func(*dynamodb.Options)) (*Out, error)) operation {
	return func(ctx context.Context, body []byte) (any, error) {
		in := new(In)
		if err := decodeValue(reflect.ValueOf(in).Elem(), body); err != nil {
			return nil, fmt.Errorf("dynamotest: decode %T: %w", in, err)
		}
		out, err := call(ctx, in)
		if err != nil {
			return nil, err
		}
		m := encodeValue(reflect.ValueOf(out))
		if m == nil {
			m = map[string]any{}
		}
		return m, nil
	}
}

var (
	attributeValueType = reflect.TypeFor[types.AttributeValue]()
	timeType           = reflect.TypeFor[time.Time]()
)

// decodeValue decodes raw into v (settable) by v's type: the SDK's
// structures member by member under their Go names, which are DynamoDB's,
// an attribute value from its one-key form, a time from epoch seconds.
func decodeValue(v reflect.Value, raw json.RawMessage) error {
	if string(raw) == "null" {
		return nil
	}
	switch v.Type() {
	case attributeValueType:
		av, err := avDecode(raw)
		if err == nil {
			v.Set(reflect.ValueOf(av))
		}
		return err
	case timeType:
		var secs float64
		if err := json.Unmarshal(raw, &secs); err != nil {
			return err
		}
		v.Set(reflect.ValueOf(time.Unix(0, int64(secs*1e9))))
		return nil
	}
	switch v.Kind() {
	case reflect.Pointer:
		n := reflect.New(v.Type().Elem())
		if err := decodeValue(n.Elem(), raw); err != nil {
			return err
		}
		v.Set(n)
	case reflect.Struct:
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			return err
		}
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if r, ok := m[f.Name]; ok && f.IsExported() {
				if err := decodeValue(v.Field(i), r); err != nil {
					return fmt.Errorf("%s: %w", f.Name, err)
				}
			}
		}
	case reflect.Map:
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			return err
		}
		out := reflect.MakeMapWithSize(v.Type(), len(m))
		for k, r := range m {
			e := reflect.New(v.Type().Elem()).Elem()
			if err := decodeValue(e, r); err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
			out.SetMapIndex(reflect.ValueOf(k).Convert(v.Type().Key()), e)
		}
		v.Set(out)
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return json.Unmarshal(raw, v.Addr().Interface())
		}
		var l []json.RawMessage
		if err := json.Unmarshal(raw, &l); err != nil {
			return err
		}
		out := reflect.MakeSlice(v.Type(), len(l), len(l))
		for i, r := range l {
			if err := decodeValue(out.Index(i), r); err != nil {
				return err
			}
		}
		v.Set(out)
	default:
		return json.Unmarshal(raw, v.Addr().Interface())
	}
	return nil
}

// encodeValue is v in DynamoDB's JSON, nil for what it leaves out (a nil
// pointer, map or slice, an empty string, the SDK's result metadata).
func encodeValue(v reflect.Value) any {
	switch v.Type() {
	case attributeValueType:
		if v.IsNil() {
			return nil
		}
		return avJSON(v.Interface().(types.AttributeValue))
	case timeType:
		return float64(v.Interface().(time.Time).UnixNano()) / 1e9
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return encodeValue(v.Elem())
	case reflect.Struct:
		m := map[string]any{}
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() || f.Name == "ResultMetadata" {
				continue
			}
			if e := encodeValue(v.Field(i)); e != nil {
				m[f.Name] = e
			}
		}
		return m
	case reflect.Map:
		if v.IsNil() {
			return nil
		}
		m := make(map[string]any, v.Len())
		for it := v.MapRange(); it.Next(); {
			m[it.Key().String()] = encodeValue(it.Value())
		}
		return m
	case reflect.Slice:
		if v.IsNil() {
			return nil
		}
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return v.Bytes()
		}
		l := make([]any, v.Len())
		for i := range l {
			l[i] = encodeValue(v.Index(i))
		}
		return l
	case reflect.String:
		if v.Len() == 0 {
			return nil
		}
		return v.String()
	}
	return v.Interface()
}
