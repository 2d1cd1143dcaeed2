package admin

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/dynalimit/dynalimit/pkg/descriptors"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
)

// PutEntity creates or replaces an entity record and writes an audit
// record. It refuses an id or parent that descriptors.EscapeValue would
// change (no request value can name it: store its escaped form), a parent
// whose chain reaches e.ID (a cycle), and a chain of more than
// descriptors.MaxChain entities counting e.ID. Replicas see the change
// within their entity cache's lifetime (Config.ConfigCacheTTL ± 10%).
func (s *Store) PutEntity(ctx context.Context, e dynamo.Entity) error {
	if e.ID == "" {
		return errors.New("dynamo: entity: empty id")
	}
	if err := CheckEntityID("id", e.ID); err != nil {
		return err
	}
	if e.Parent == e.ID {
		return fmt.Errorf("dynamo: entity %q: an entity cannot be its own parent", e.ID)
	}
	if e.Parent != "" {
		if err := CheckEntityID("parent", e.Parent); err != nil {
			return err
		}
	}
	ns := s.t.NsOr(e.Namespace)
	e.Namespace = ns
	if err := s.checkChain(ctx, ns, e.ID, e.Parent); err != nil {
		return err
	}
	before, err := s.Entity(ctx, ns, e.ID)
	if err != nil && !errors.Is(err, dynamo.ErrNotFound) {
		return err
	}
	it := item.Key(item.EntityPK(ns, e.ID), item.SKMeta)
	it["id"] = item.StrAV(e.ID)
	it[item.AttrNamespace] = item.StrAV(ns)
	it[item.AttrCascade] = item.BoolAV(e.Cascade)
	if e.Parent != "" {
		it[item.AttrParent] = item.StrAV(e.Parent)
		it[item.AttrGSI1PK] = item.StrAV(item.NSPart(ns) + "/PARENT#" + item.Esc(e.Parent))
		it[item.AttrGSI1SK] = item.StrAV("ENTITY#" + item.Esc(e.ID))
	}
	cctx, cancel := s.t.Call(ctx)
	defer cancel()
	if _, err := s.t.API.PutItem(cctx, &dynamodb.PutItemInput{TableName: aws.String(s.t.Name), Item: it}); err != nil {
		return dynamo.Classify("put entity", err)
	}
	s.st.ForgetEntity(item.EntityPK(ns, e.ID))
	return s.writeAudit(ctx, ns, Scope{Entity: e.ID}, "entity.put", entityString(before), entityString(e))
}

// CheckEntityID refuses an entity id (what: "id" or "parent") that no
// request value names: hierarchical rules name an entity by its value as
// descriptors.EscapeValue writes it. Any store of entity records refuses
// them alike.
func CheckEntityID(what, id string) error {
	if want, ok := dynamo.RequestForm(id); !ok {
		return fmt.Errorf("dynamo: entity %s %q: requests name entities by their values escaped ('/', '#', '=', '&', '%%', '~', control bytes and invalid UTF-8 as %%XX), and no value escapes to this: use %q", what, id, want)
	}
	return nil
}

// checkChain refuses parent for id when the chain above parent reaches id
// (a cycle) or when id, parent and the entities above it are more than
// descriptors.MaxChain. It reads the records as stored now.
func (s *Store) checkChain(ctx context.Context, ns, id, parent string) error {
	chain := []string{id}
	for cur := parent; cur != ""; {
		if cur == id {
			return fmt.Errorf("dynamo: entity %q: parent %q would make a cycle (%s): choose a parent that is not %q or below it, or change the parent of an entity in the cycle first",
				id, parent, strings.Join(append(chain, cur), " -> "), id)
		}
		if slices.Contains(chain, cur) {
			return fmt.Errorf("dynamo: entity %q: the chain above parent %q loops (%s): give one of its entities another parent first",
				id, parent, strings.Join(append(chain, cur), " -> "))
		}
		chain = append(chain, cur)
		if len(chain) > descriptors.MaxChain {
			return fmt.Errorf("dynamo: entity %q: parent %q makes a chain of more than %d entities (%s …): choose a parent nearer the top",
				id, parent, descriptors.MaxChain, strings.Join(chain, " -> "))
		}
		e, err := s.Entity(ctx, ns, cur)
		if errors.Is(err, dynamo.ErrNotFound) {
			return nil // the chain ends at a parent without a record
		}
		if err != nil {
			return err
		}
		cur = e.Parent
	}
	return nil
}

func entityString(e dynamo.Entity) string {
	if e.ID == "" {
		return ""
	}
	return fmt.Sprintf("id=%q parent=%q cascade=%t", e.ID, e.Parent, e.Cascade)
}

// Entity returns the entity record of id in namespace ns (empty: the
// store's), ErrNotFound when none. It reads the table (strongly
// consistent), and refreshes the replica's entity cache with what it read.
func (s *Store) Entity(ctx context.Context, ns, id string) (dynamo.Entity, error) {
	ns = s.t.NsOr(ns)
	pk := item.EntityPK(ns, id)
	it, err := s.t.Get(ctx, pk, item.SKMeta)
	if err != nil {
		return dynamo.Entity{}, err
	}
	ent, ok := dynamo.EntityOf(it)
	s.st.KeepEntity(pk, ent, ok)
	if !ok {
		return dynamo.Entity{}, fmt.Errorf("dynamo: entity %q: %w", id, dynamo.ErrNotFound)
	}
	if ent.Namespace == "" {
		ent.Namespace = ns
	}
	return ent, nil
}

// Children returns the ids of the entities of namespace ns (empty: the
// store's) whose parent is id (GSI1).
func (s *Store) Children(ctx context.Context, ns, id string) ([]string, error) {
	ns = s.t.NsOr(ns)
	var out []string
	err := s.t.Query(ctx, "query children", &dynamodb.QueryInput{
		IndexName:                 aws.String("GSI1"),
		KeyConditionExpression:    aws.String("#p = :p"),
		ExpressionAttributeNames:  map[string]string{"#p": item.AttrGSI1PK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":p": item.StrAV(item.NSPart(ns) + "/PARENT#" + item.Esc(id))},
	}, func(items []map[string]types.AttributeValue) {
		for _, it := range items {
			out = append(out, item.GetS(it, "id"))
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// AuditRecord is one change an operator made: of limits, entities,
// namespaces, or a bucket reset.
type AuditRecord struct {
	ID     string // ULID: sorts by time
	At     time.Time
	Action string // "limits.set", "entity.put", "namespace.register", "bucket.reset", …
	Scope  string
	Before string
	After  string
	// Principal is who made the change, as the store that wrote it was
	// told (WithPrincipal); empty when it was not.
	Principal string
}

// Audit returns the audit records of an entity (its limits, its record,
// resets of its buckets), oldest first. Pass Scope{System: true} (limits
// of the system scope, the namespace's registration and lifecycle) or
// Scope{Resource: r} for changes without an entity.
func (s *Store) Audit(ctx context.Context, sc Scope) ([]AuditRecord, error) {
	ns := s.t.NsOr(sc.Namespace)
	var out []AuditRecord
	err := s.t.Query(ctx, "query audit", &dynamodb.QueryInput{
		KeyConditionExpression:    aws.String("#p = :p AND begins_with(#s, :s)"),
		ExpressionAttributeNames:  map[string]string{"#p": item.AttrPK, "#s": item.AttrSK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":p": item.StrAV(item.AuditPK(ns, auditEntity(sc))), ":s": item.StrAV("#AUDIT#")},
		ConsistentRead:            aws.Bool(true),
	}, func(items []map[string]types.AttributeValue) {
		for _, it := range items {
			out = append(out, AuditRecord{
				ID: strings.TrimPrefix(item.GetS(it, item.AttrSK), "#AUDIT#"), At: time.UnixMilli(item.GetN(it, AttrAt)),
				Action: item.GetS(it, AttrAction), Scope: item.GetS(it, AttrScope), Before: item.GetS(it, AttrBefore), After: item.GetS(it, AttrAfter),
				Principal: item.GetS(it, AttrPrincipal),
			})
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Namespace is a registered namespace.
type Namespace struct {
	Name string
	ID   string
	// State is NamespaceActive, NamespaceDeleted or NamespacePurged.
	State string
	// Changed is when the state last changed (zero: never since it was
	// registered).
	Changed time.Time
}

// RegisterNamespace registers name (idempotent) and returns its record.
func (s *Store) RegisterNamespace(ctx context.Context, name string) (Namespace, error) {
	if name == "" {
		return Namespace{}, errors.New("dynamo: namespace: empty name")
	}
	it, err := s.t.Get(ctx, item.VersionPK, item.NamespaceSK(name))
	if err != nil {
		return Namespace{}, err
	}
	if len(it) > 0 {
		return namespaceOf(it), nil
	}
	var rb [6]byte
	_, _ = rand.Read(rb[:])
	id := hex.EncodeToString(rb[:])
	byName := item.Key(item.VersionPK, item.NamespaceSK(name))
	byName["name"], byName["id"] = item.StrAV(name), item.StrAV(id)
	byID := item.Key(item.VersionPK, item.NamespaceIDSK(id))
	byID["name"], byID["id"] = item.StrAV(name), item.StrAV(id)
	cond := aws.String("attribute_not_exists(#pk)")
	names := map[string]string{"#pk": item.AttrPK}
	cctx, cancel := s.t.Call(ctx)
	defer cancel()
	_, err = s.t.API.TransactWriteItems(cctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: aws.String(s.t.Name), Item: byName, ConditionExpression: cond, ExpressionAttributeNames: names}},
		{Put: &types.Put{TableName: aws.String(s.t.Name), Item: byID, ConditionExpression: cond, ExpressionAttributeNames: names}},
	}})
	if err != nil {
		if cerr := dynamo.Classify("register namespace", err); errors.Is(cerr, dynamo.ErrCondition) {
			return s.RegisterNamespace(ctx, name) // registered concurrently
		} else {
			return Namespace{}, cerr
		}
	}
	if err := s.writeAudit(ctx, name, Scope{System: true}, "namespace.register", "", "name="+name+" id="+id); err != nil {
		return Namespace{}, err
	}
	return Namespace{Name: name, ID: id, State: NamespaceActive}, nil
}

// Namespaces lists registered namespaces by name.
func (s *Store) Namespaces(ctx context.Context) ([]Namespace, error) {
	var out []Namespace
	err := s.t.Query(ctx, "list namespaces", &dynamodb.QueryInput{
		KeyConditionExpression:    aws.String("#p = :p AND begins_with(#s, :s)"),
		ExpressionAttributeNames:  map[string]string{"#p": item.AttrPK, "#s": item.AttrSK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":p": item.StrAV(item.VersionPK), ":s": item.StrAV("#NAMESPACE#")},
		ConsistentRead:            aws.Bool(true),
	}, func(items []map[string]types.AttributeValue) {
		for _, it := range items {
			out = append(out, namespaceOf(it))
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
