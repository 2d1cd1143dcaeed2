package item

import (
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// Expr builds one update or condition expression. Every attribute name and
// Value goes through a placeholder (#a0, :v0, …): names built from user text
// or from configured limit names never appear in the expression itself.
type Expr struct {
	names   map[string]string
	byName  map[string]string
	values  map[string]types.AttributeValue
	set     []string
	add     []string
	removes []string
	cond    []string
}

// NewExpr returns an empty expression.
func NewExpr() *Expr {
	return &Expr{names: map[string]string{}, byName: map[string]string{}, values: map[string]types.AttributeValue{}}
}

// Name returns the placeholder (#a0, #a1, …) of attribute name attr,
// the same one for every use of attr.
func (e *Expr) Name(attr string) string {
	if p, ok := e.byName[attr]; ok {
		return p
	}
	p := "#a" + strconv.Itoa(len(e.names))
	e.names[p] = attr
	e.byName[attr] = p
	return p
}

// Value returns a new placeholder (:v0, :v1, …) bound to av.
func (e *Expr) Value(av types.AttributeValue) string {
	p := ":v" + strconv.Itoa(len(e.values))
	e.values[p] = av
	return p
}

// Num returns a new placeholder bound to the number v.
func (e *Expr) Num(v int64) string { return e.Value(NumAV(v)) }

// SetAttr sets attribute attr to av (SET).
func (e *Expr) SetAttr(attr string, av types.AttributeValue) {
	e.set = append(e.set, e.Name(attr)+" = "+e.Value(av))
}

// AddNum adds v to the number attribute attr, which starts at 0 when
// absent (ADD).
func (e *Expr) AddNum(attr string, v int64) {
	e.add = append(e.add, e.Name(attr)+" "+e.Num(v))
}

// Condition adds c, written with placeholders from Name and Value, to the
// condition expression: every condition added must hold (AND).
func (e *Expr) Condition(c string) { e.cond = append(e.cond, c) }

// RemoveAttr removes an attribute (REMOVE).
func (e *Expr) RemoveAttr(attr string) { e.removes = append(e.removes, e.Name(attr)) }

// Update returns the update expression (its SET, ADD and REMOVE clauses),
// or nil when nothing is updated.
func (e *Expr) Update() *string {
	var parts []string
	if len(e.set) > 0 {
		parts = append(parts, "SET "+strings.Join(e.set, ", "))
	}
	if len(e.add) > 0 {
		parts = append(parts, "ADD "+strings.Join(e.add, ", "))
	}
	if len(e.removes) > 0 {
		parts = append(parts, "REMOVE "+strings.Join(e.removes, ", "))
	}
	if len(parts) == 0 {
		return nil
	}
	return aws.String(strings.Join(parts, " "))
}

// ConditionExpr returns the condition expression, or nil when there is no
// condition.
func (e *Expr) ConditionExpr() *string {
	if len(e.cond) == 0 {
		return nil
	}
	return aws.String(strings.Join(e.cond, " AND "))
}

// AttrNames returns the name placeholders' attributes, for
// ExpressionAttributeNames (nil when there are none).
func (e *Expr) AttrNames() map[string]string {
	if len(e.names) == 0 {
		return nil
	}
	return e.names
}

// AttrValues returns the value placeholders' values, for
// ExpressionAttributeValues (nil when there are none).
func (e *Expr) AttrValues() map[string]types.AttributeValue {
	if len(e.values) == 0 {
		return nil
	}
	return e.values
}

// AddBig adds the 128-bit number v to the number attribute attr (ADD).
func (e *Expr) AddBig(attr string, v tokenbucket.Int128) {
	e.add = append(e.add, e.Name(attr)+" "+e.Value(BigAV(v)))
}

// StampWriter records the writer's clock on a bucket write, and keeps the
// clock of the write before (DynamoDB reads every operand of an update
// before it applies any).
func StampWriter(e *Expr, nowMs int64) {
	now := e.Num(nowMs)
	e.set = append(e.set,
		e.Name(AttrPrevWriter)+" = if_not_exists("+e.Name(AttrWriter)+", "+now+")",
		e.Name(AttrWriter)+" = "+now)
}
