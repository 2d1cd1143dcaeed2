package dynamo

import (
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/pkg/tokenbucket"
)

// expr builds one update or condition expression. Every attribute name and
// value goes through a placeholder (#a0, :v0, …): names built from user text
// or from configured limit names never appear in the expression itself.
type expr struct {
	names   map[string]string
	byName  map[string]string
	values  map[string]types.AttributeValue
	set     []string
	add     []string
	removes []string
	cond    []string
}

func newExpr() *expr {
	return &expr{names: map[string]string{}, byName: map[string]string{}, values: map[string]types.AttributeValue{}}
}

func (e *expr) name(attr string) string {
	if p, ok := e.byName[attr]; ok {
		return p
	}
	p := "#a" + strconv.Itoa(len(e.names))
	e.names[p] = attr
	e.byName[attr] = p
	return p
}

func (e *expr) value(av types.AttributeValue) string {
	p := ":v" + strconv.Itoa(len(e.values))
	e.values[p] = av
	return p
}

func (e *expr) num(v int64) string { return e.value(numAV(v)) }

func (e *expr) setAttr(attr string, av types.AttributeValue) {
	e.set = append(e.set, e.name(attr)+" = "+e.value(av))
}

func (e *expr) addNum(attr string, v int64) {
	e.add = append(e.add, e.name(attr)+" "+e.num(v))
}

func (e *expr) condition(c string) { e.cond = append(e.cond, c) }

// removeAttr removes an attribute (REMOVE).
func (e *expr) removeAttr(attr string) { e.removes = append(e.removes, e.name(attr)) }

func (e *expr) update() *string {
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

func (e *expr) conditionExpr() *string {
	if len(e.cond) == 0 {
		return nil
	}
	return aws.String(strings.Join(e.cond, " AND "))
}

func (e *expr) attrNames() map[string]string {
	if len(e.names) == 0 {
		return nil
	}
	return e.names
}

func (e *expr) attrValues() map[string]types.AttributeValue {
	if len(e.values) == 0 {
		return nil
	}
	return e.values
}

func (e *expr) addBig(attr string, v tokenbucket.Int128) {
	e.add = append(e.add, e.name(attr)+" "+e.value(bigAV(v)))
}
