package admin

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
)

// Namespace states in the registry. A record without one is active.
const (
	NamespaceActive  = "active"
	NamespaceDeleted = "deleted" // soft-deleted: its items are kept, recover undoes it
	NamespacePurged  = "purged"  // its items were deleted
)

// Registry attributes of a namespace record.
const (
	attrState     = "state"
	attrChangedAt = "changed_at"
)

// ErrNamespaceActive is the error of a purge of a namespace the registry holds active
// (delete it first).
var ErrNamespaceActive = errors.New("dynamo: namespace is active")

// namespaceOf decodes a registry record.
func namespaceOf(it map[string]types.AttributeValue) Namespace {
	ns := Namespace{Name: item.GetS(it, "name"), ID: item.GetS(it, "id"), State: item.GetS(it, attrState)}
	if ns.State == "" {
		ns.State = NamespaceActive
	}
	if at := item.GetN(it, attrChangedAt); at > 0 {
		ns.Changed = time.UnixMilli(at)
	}
	return ns
}

// Namespace returns the registry record of name, ErrNotFound when it is
// not registered.
func (s *Store) Namespace(ctx context.Context, name string) (Namespace, error) {
	it, err := s.t.Get(ctx, item.VersionPK, item.NamespaceSK(name))
	if err != nil {
		return Namespace{}, err
	}
	if len(it) == 0 {
		return Namespace{}, fmt.Errorf("dynamo: namespace %q is not registered: %w", name, dynamo.ErrNotFound)
	}
	return namespaceOf(it), nil
}

// DeleteNamespace soft-deletes a registered namespace: its record's state
// becomes deleted (conditionally on it being active), and an audit record
// (action "namespace.delete", system scope of the namespace) says who and
// when. Its items stay; RecoverNamespace undoes it. It reports false when
// the namespace was already deleted (nothing written), and ErrNotFound
// when it is not registered.
func (s *Store) DeleteNamespace(ctx context.Context, name string) (bool, error) {
	return s.changeNamespace(ctx, name, NamespaceDeleted, "namespace.delete", NamespaceActive)
}

// RecoverNamespace makes a deleted (or purged) namespace active again,
// conditionally on its state, with an audit record ("namespace.recover").
// It reports false when the namespace was already active.
func (s *Store) RecoverNamespace(ctx context.Context, name string) (bool, error) {
	return s.changeNamespace(ctx, name, NamespaceActive, "namespace.recover", NamespaceDeleted, NamespacePurged)
}

// changeNamespace moves name's record to state to from one of from, and
// audits the change as action.
func (s *Store) changeNamespace(ctx context.Context, name, to, action string, from ...string) (bool, error) {
	cur, err := s.Namespace(ctx, name)
	if err != nil {
		return false, err
	}
	if cur.State == to {
		return false, nil
	}
	if err := s.moveNamespace(ctx, cur, to, from...); err != nil {
		return false, err
	}
	return true, s.writeAudit(ctx, name, Scope{System: true}, action, "state="+cur.State, "state="+to)
}

// moveNamespace sets the state of cur's record to to, on the condition
// that it is in one of from (a record without a state is active).
func (s *Store) moveNamespace(ctx context.Context, cur Namespace, to string, from ...string) error {
	name := cur.Name
	e := item.NewExpr()
	e.SetAttr(attrState, item.StrAV(to))
	e.SetAttr(attrChangedAt, item.NumAV(s.t.Now().UnixMilli()))
	conds := make([]string, 0, len(from)+1)
	for _, f := range from {
		conds = append(conds, e.Name(attrState)+" = "+e.Value(item.StrAV(f)))
		if f == NamespaceActive {
			conds = append(conds, "attribute_not_exists("+e.Name(attrState)+")")
		}
	}
	e.Condition("attribute_exists(" + e.Name(item.AttrPK) + ") AND (" + strings.Join(conds, " OR ") + ")")
	cctx, cancel := s.t.Call(ctx)
	defer cancel()
	_, err := s.t.API.UpdateItem(cctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(s.t.Name), Key: item.Key(item.VersionPK, item.NamespaceSK(name)),
		UpdateExpression: e.Update(), ConditionExpression: e.ConditionExpr(),
		ExpressionAttributeNames: e.AttrNames(), ExpressionAttributeValues: e.AttrValues(),
	})
	if err := dynamo.Classify("namespace "+to, err); errors.Is(err, dynamo.ErrCondition) {
		return fmt.Errorf("dynamo: namespace %q: its state changed meanwhile (it was %s): %w", name, cur.State, dynamo.ErrConflict)
	} else if err != nil {
		return err
	}
	return nil
}

// Orphan is a namespace that has items in the table and no registry
// record.
type Orphan struct {
	// Name is the namespace's name ("~" and a hash when its name was too
	// long to keep in keys and none of its items names it).
	Name string
	// Items is how many items the namespace has.
	Items int
}

// Orphans lists the namespaces that have items but no registry record, by
// name, with their item counts. It scans the whole table (keys and the
// namespace attribute only, but a Scan is charged for every item it reads:
// about one read unit per 8 KB of table, eventually consistent), pausing
// for nothing: run it off-peak on a large table.
func (s *Store) Orphans(ctx context.Context) ([]Orphan, error) {
	reg, err := s.Namespaces(ctx)
	if err != nil {
		return nil, err
	}
	registered := map[string]bool{}
	for _, ns := range reg {
		registered[item.NSPart(ns.Name)] = true
	}
	counts := map[string]*Orphan{}
	err = s.scan(ctx, "n", []string{item.AttrPK, item.AttrNamespace}, func(items []map[string]types.AttributeValue) error {
		for _, it := range items {
			part, _, _ := strings.Cut(item.GetS(it, item.AttrPK), "/")
			if registered[part] {
				continue
			}
			o := counts[part]
			if o == nil {
				o = &Orphan{Name: namespaceName(part)}
				counts[part] = o
			}
			if raw := item.GetS(it, item.AttrNamespace); raw != "" {
				o.Name = raw
			}
			o.Items++
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]Orphan, 0, len(counts))
	for _, o := range counts {
		out = append(out, *o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// namespaceName is the name of the namespace whose key prefix is part
// ("n" + esc(name)), the escape undone.
func namespaceName(part string) string {
	e := strings.TrimPrefix(part, "n")
	if name, err := url.PathUnescape(e); err == nil {
		return name
	}
	return e
}

// scanPage bounds the items a purge scan reads per page, so that deleting
// a page's items keeps pace with reading them.
const scanPage = 1000

// scan reads every item whose partition key begins with prefix (attrs
// only), a page at a time, and hands each page's items to page.
func (s *Store) scan(ctx context.Context, prefix string, attrs []string, page func([]map[string]types.AttributeValue) error) error {
	names := map[string]string{"#p": item.AttrPK}
	proj := make([]string, len(attrs))
	for i, a := range attrs {
		proj[i] = "#x" + strconv.Itoa(i)
		names[proj[i]] = a
	}
	var start map[string]types.AttributeValue
	for {
		cctx, cancel := s.t.Call(ctx)
		res, err := s.t.API.Scan(cctx, &dynamodb.ScanInput{
			TableName: aws.String(s.t.Name), Limit: aws.Int32(scanPage), ExclusiveStartKey: start,
			FilterExpression: aws.String("begins_with(#p, :p)"), ProjectionExpression: aws.String(strings.Join(proj, ", ")),
			ExpressionAttributeNames: names, ExpressionAttributeValues: map[string]types.AttributeValue{":p": item.StrAV(prefix)},
		})
		cancel()
		if err != nil {
			return dynamo.Classify("scan "+s.t.Name, err)
		}
		if err := page(res.Items); err != nil {
			return err
		}
		if start = res.LastEvaluatedKey; len(start) == 0 {
			return nil
		}
	}
}
