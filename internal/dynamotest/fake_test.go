package dynamotest

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

func n(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }
func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

func TestFakeConditions(t *testing.T) {
	item := map[string]types.AttributeValue{"PK": s("p"), "tk": n("5"), "sc": n("1")}
	names := map[string]string{"#t": "tk", "#s": "sc", "#m": "missing", "#p": "PK"}
	values := map[string]types.AttributeValue{":lo": n("3"), ":hi": n("7"), ":one": n("1"), ":ten": n("10"), ":pre": s("p")}
	cases := []struct {
		expr string
		want bool
	}{
		{"#t BETWEEN :lo AND :hi", true},
		{"#t BETWEEN :hi AND :ten", false},
		{"#t >= :lo AND #s = :one", true},
		{"#t <= :one", false},
		{"attribute_not_exists(#m) AND attribute_exists(#t)", true},
		{"attribute_not_exists(#p) OR #s = :one", true},
		{"attribute_not_exists(#p) OR #s = :ten", false},
		{"#m >= :one", false},
		{"begins_with(#p, :pre)", true},
		{"(#t = :one OR #t BETWEEN :lo AND :hi) AND #s = :one", true},
	}
	for _, c := range cases {
		got, err := evalCond(aws.String(c.expr), item, names, values)
		if err != nil || got != c.want {
			t.Errorf("evalCond(%q) = %t, %v, want %t", c.expr, got, err, c.want)
		}
	}
}

func TestFakeUpdateReturnsOldImageOnFailure(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	if _, err := f.CreateTable(ctx, &dynamodb.CreateTableInput{TableName: aws.String("t")}); err != nil {
		t.Fatalf("CreateTable() = %v", err)
	}
	key := map[string]types.AttributeValue{"PK": s("a"), "SK": s("b")}
	upd := func(cond string) (*dynamodb.UpdateItemOutput, error) {
		return f.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String("t"), Key: key,
			UpdateExpression:                    aws.String("SET #x = :v ADD #c :one"),
			ConditionExpression:                 aws.String(cond),
			ExpressionAttributeNames:            map[string]string{"#x": "x", "#c": "c", "#p": "PK"},
			ExpressionAttributeValues:           map[string]types.AttributeValue{":v": s("set"), ":one": n("1")},
			ReturnValues:                        types.ReturnValueAllNew,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		})
	}
	out, err := upd("attribute_not_exists(#p)")
	if err != nil || out.Attributes["c"].(*types.AttributeValueMemberN).Value != "1" {
		t.Fatalf("UpdateItem(create) = %+v, %v, want c = 1", out, err)
	}
	_, err = upd("attribute_not_exists(#p)")
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) || ccf.Item["c"].(*types.AttributeValueMemberN).Value != "1" {
		t.Fatalf("UpdateItem(again) = %v, want ConditionalCheckFailed with the old image", err)
	}
	if f.Calls("UpdateItem") != 2 {
		t.Errorf("Calls(UpdateItem) = %d, want 2", f.Calls("UpdateItem"))
	}
}

// TestFakeIfNotExists wants SET p = if_not_exists(w, :v), w = :v to copy
// w's value before the update into p, or :v when the item had no w.
func TestFakeIfNotExists(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	if _, err := f.CreateTable(ctx, &dynamodb.CreateTableInput{TableName: aws.String("t")}); err != nil {
		t.Fatalf("CreateTable() = %v", err)
	}
	key := map[string]types.AttributeValue{"PK": s("a"), "SK": s("b")}
	for _, tc := range []struct{ v, wantP, wantW string }{
		{"1", "1", "1"},
		{"2", "1", "2"},
		{"3", "2", "3"},
	} {
		out, err := f.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String("t"), Key: key,
			UpdateExpression:          aws.String("SET #p = if_not_exists(#w, :v), #w = :v"),
			ExpressionAttributeNames:  map[string]string{"#p": "p", "#w": "w"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":v": n(tc.v)},
			ReturnValues:              types.ReturnValueAllNew,
		})
		if err != nil {
			t.Fatalf("UpdateItem(w = %s) = %v", tc.v, err)
		}
		p, w := out.Attributes["p"].(*types.AttributeValueMemberN).Value, out.Attributes["w"].(*types.AttributeValueMemberN).Value
		if p != tc.wantP || w != tc.wantW {
			t.Errorf("UpdateItem(w = %s) = p %s, w %s, want p %s, w %s", tc.v, p, w, tc.wantP, tc.wantW)
		}
	}
}
