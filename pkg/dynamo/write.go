package dynamo

import (
	"math"
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
	names  map[string]string
	byName map[string]string
	values map[string]types.AttributeValue
	set    []string
	add    []string
	cond   []string
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

func (e *expr) update() *string {
	var parts []string
	if len(e.set) > 0 {
		parts = append(parts, "SET "+strings.Join(e.set, ", "))
	}
	if len(e.add) > 0 {
		parts = append(parts, "ADD "+strings.Join(e.add, ", "))
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

// limitWrite is what one write does to one limit of an item.
type limitWrite struct {
	prefix  string
	shape   tokenbucket.Limit
	present bool // the limit exists in the image
	img     limitImage
	s       sym   // final symbolic state
	revert  int64 // tokens to add back to undo the debits (compensation)
}

// writeLimit adds the conditions and updates for one limit to e.
func writeLimit(e *expr, lw *limitWrite, itemExists bool) {
	tk := e.name(limitAttr2(lw.prefix, fieldTokens))
	lr := limitAttr2(lw.prefix, fieldRefilled)
	s := &lw.s
	if !lw.present {
		if itemExists {
			e.condition("attribute_not_exists(" + tk + ")")
		}
		e.setAttr(limitAttr2(lw.prefix, fieldTokens), numAV(s.off))
		e.setAttr(lr, numAV(s.last))
		e.setAttr(limitAttr2(lw.prefix, fieldConsumed), numAV(s.used))
		writeShape(e, lw)
		return
	}
	switch {
	case s.lo != math.MinInt64 && s.hi != math.MaxInt64:
		e.condition(tk + " BETWEEN " + e.num(s.lo) + " AND " + e.num(s.hi))
	case s.lo != math.MinInt64:
		e.condition(tk + " >= " + e.num(s.lo))
	case s.hi != math.MaxInt64:
		e.condition(tk + " <= " + e.num(s.hi))
	default:
		e.condition("attribute_exists(" + tk + ")")
	}
	if s.last != lw.img.LastRefill {
		e.condition(e.name(lr) + " = " + e.num(lw.img.LastRefill))
		e.setAttr(lr, numAV(s.last))
	}
	if s.fixed {
		e.setAttr(limitAttr2(lw.prefix, fieldTokens), numAV(s.off))
	} else if s.off != 0 {
		e.addNum(limitAttr2(lw.prefix, fieldTokens), s.off)
	}
	if s.used != 0 {
		e.addNum(limitAttr2(lw.prefix, fieldConsumed), s.used)
	}
	if lw.img.Capacity != int64(lw.shape.Capacity) || lw.img.Amount != int64(lw.shape.RefillAmount) || lw.img.PeriodMs != lw.shape.RefillPeriod.Milliseconds() {
		writeShape(e, lw)
	}
}

func writeShape(e *expr, lw *limitWrite) {
	e.setAttr(limitAttr2(lw.prefix, fieldCapacity), numAV(int64(lw.shape.Capacity)))
	e.setAttr(limitAttr2(lw.prefix, fieldAmount), numAV(int64(lw.shape.RefillAmount)))
	e.setAttr(limitAttr2(lw.prefix, fieldPeriod), numAV(lw.shape.RefillPeriod.Milliseconds()))
}

// limitAttr2 is the attribute name of field f for an attribute prefix.
func limitAttr2(prefix, f string) string { return prefix + "_" + f }

// applyWrite returns the image after a write described by lws landed on an
// item whose actual token counts were tk (by prefix). Used to keep the local
// image cache close to the table without a read.
func guessAfter(im *image, lws []limitWrite, n int, nowMs int64, changedRefill bool) *image {
	out := &image{exists: true, shardCount: n, limits: map[string]limitImage{}}
	if im != nil && im.exists {
		out.rf = im.rf
		for p, l := range im.limits {
			out.limits[p] = l
		}
	}
	if changedRefill {
		out.rf = nowMs
	}
	for _, lw := range lws {
		l := out.limits[lw.prefix]
		if lw.s.fixed {
			l.Tokens = lw.s.off
		} else {
			l.Tokens = lw.img.Tokens + lw.s.off
		}
		l.LastRefill = lw.s.last
		l.Capacity, l.Amount, l.PeriodMs = int64(lw.shape.Capacity), int64(lw.shape.RefillAmount), lw.shape.RefillPeriod.Milliseconds()
		l.Consumed += lw.s.used
		out.limits[lw.prefix] = l
	}
	return out
}
