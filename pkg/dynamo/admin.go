package dynamo

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
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
)

// Entity is a stored entity record: an id with an optional parent, and
// whether debits of the entity cascade to its parents.
type Entity struct {
	// Namespace is the entity's namespace; empty is the store's
	// (Config.Namespace).
	Namespace string
	ID        string
	Parent    string
	Cascade   bool
}

// cachedEntity is an entity record as the entity cache holds it: whether
// it exists, and until when it is trusted.
type cachedEntity struct {
	expires time.Time
	ent     Entity
	ok      bool // the record exists
}

// PutEntity creates or replaces an entity record and writes an audit
// record. It refuses an id or parent that descriptors.EscapeValue would
// change (no request value can name it: store its escaped form), a parent
// whose chain reaches e.ID (a cycle), and a chain of more than
// descriptors.MaxChain entities counting e.ID. Replicas see the change
// within their entity cache's lifetime (Config.ConfigCacheTTL ± 10%).
func (s *Store) PutEntity(ctx context.Context, e Entity) error {
	if e.ID == "" {
		return errors.New("dynamo: entity: empty id")
	}
	if err := checkEntityID("id", e.ID); err != nil {
		return err
	}
	if e.Parent == e.ID {
		return fmt.Errorf("dynamo: entity %q: an entity cannot be its own parent", e.ID)
	}
	if e.Parent != "" {
		if err := checkEntityID("parent", e.Parent); err != nil {
			return err
		}
	}
	ns := s.tbl.NsOr(e.Namespace)
	e.Namespace = ns
	if err := s.checkChain(ctx, ns, e.ID, e.Parent); err != nil {
		return err
	}
	before, err := s.Entity(ctx, ns, e.ID)
	if err != nil && !errors.Is(err, ErrNotFound) {
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
	cctx, cancel := s.tbl.Call(ctx)
	defer cancel()
	if _, err := s.api.PutItem(cctx, &dynamodb.PutItemInput{TableName: aws.String(s.cfg.Table), Item: it}); err != nil {
		return Classify("put entity", err)
	}
	s.mu.Lock()
	s.ents.remove(item.EntityPK(ns, e.ID))
	s.mu.Unlock()
	return s.audit(ctx, ns, Scope{Entity: e.ID}, "entity.put", entityString(before), entityString(e))
}

// checkEntityID refuses an entity id (what: "id" or "parent") that no
// request value names: hierarchical rules name an entity by its value as
// descriptors.EscapeValue writes it.
func checkEntityID(what, id string) error {
	if want, ok := requestForm(id); !ok {
		return fmt.Errorf("dynamo: entity %s %q: requests name entities by their values escaped ('/', '#', '=', '&', '%%', '~', control bytes and invalid UTF-8 as %%XX), and no value escapes to this: use %q", what, id, want)
	}
	return nil
}

// requestForm reports whether id is how descriptors.EscapeValue writes
// some request value, and otherwise returns the form that names the value
// id most likely means: id's %XX sequences decoded where they are well
// formed, escaped again.
func requestForm(id string) (string, bool) {
	raw := make([]byte, 0, len(id))
	for i := 0; i < len(id); i++ {
		if id[i] == '%' && i+2 < len(id) && hexDigit(id[i+1]) >= 0 && hexDigit(id[i+2]) >= 0 {
			raw = append(raw, byte(hexDigit(id[i+1])<<4|hexDigit(id[i+2])))
			i += 2
			continue
		}
		raw = append(raw, id[i])
	}
	want := descriptors.EscapeValue(string(raw))
	return want, want == id
}

// hexDigit returns the value of a hex digit, or -1.
func hexDigit(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	}
	return -1
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
		if errors.Is(err, ErrNotFound) {
			return nil // the chain ends at a parent without a record
		}
		if err != nil {
			return err
		}
		cur = e.Parent
	}
	return nil
}

func entityString(e Entity) string {
	if e.ID == "" {
		return ""
	}
	return fmt.Sprintf("id=%q parent=%q cascade=%t", e.ID, e.Parent, e.Cascade)
}

// Entity returns the entity record of id in namespace ns (empty: the
// store's), ErrNotFound when none. It reads the table (strongly
// consistent), and refreshes the replica's entity cache with what it read.
func (s *Store) Entity(ctx context.Context, ns, id string) (Entity, error) {
	ns = s.tbl.NsOr(ns)
	pk := item.EntityPK(ns, id)
	it, err := s.tbl.Get(ctx, pk, item.SKMeta)
	if err != nil {
		return Entity{}, err
	}
	ent, ok := entityOf(it)
	s.mu.Lock()
	s.ents.add(pk, cachedEntity{expires: s.now().Add(s.cacheTTL()), ent: ent, ok: ok})
	s.mu.Unlock()
	if !ok {
		return Entity{}, fmt.Errorf("dynamo: entity %q: %w", id, ErrNotFound)
	}
	if ent.Namespace == "" {
		ent.Namespace = ns
	}
	return ent, nil
}

// Children returns the ids of the entities of namespace ns (empty: the
// store's) whose parent is id (GSI1).
func (s *Store) Children(ctx context.Context, ns, id string) ([]string, error) {
	ns = s.tbl.NsOr(ns)
	var out []string
	err := s.tbl.Query(ctx, "query children", &dynamodb.QueryInput{
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

// Audit attributes.
const (
	attrAction    = "action"
	attrScope     = "scope"
	attrAt        = "at"
	attrBefore    = "before"
	attrAfter     = "after"
	attrPrincipal = "principal"
)

// audit writes one audit record under the entity it concerns (or "_system"
// and "_resource" for scopes without an entity).
func (s *Store) audit(ctx context.Context, ns string, sc Scope, action, before, after string) error {
	cctx, cancel := s.tbl.Call(ctx)
	defer cancel()
	p := s.auditPut(ns, sc, action, before, after)
	if _, err := s.api.PutItem(cctx, &dynamodb.PutItemInput{TableName: p.TableName, Item: p.Item}); err != nil {
		return Classify("put audit", err)
	}
	return nil
}

// auditPut is the write of one audit record, for audit or a transaction.
func (s *Store) auditPut(ns string, sc Scope, action, before, after string) *types.Put {
	now := s.now()
	it := item.Key(item.AuditPK(ns, auditEntity(sc)), item.AuditSK(newULID(now)))
	it[attrAction] = item.StrAV(action)
	it[attrScope] = item.StrAV(sc.String())
	it[attrAt] = item.NumAV(now.UnixMilli())
	it[attrBefore] = item.StrAV(before)
	it[attrAfter] = item.StrAV(after)
	it[item.AttrNamespace] = item.StrAV(ns)
	if s.principal != "" {
		it[attrPrincipal] = item.StrAV(s.principal)
	}
	return &types.Put{TableName: aws.String(s.cfg.Table), Item: it}
}

func auditEntity(sc Scope) string {
	switch {
	case sc.Entity != "":
		return sc.Entity
	case sc.System:
		return "\x00system"
	default:
		return "\x00resource/" + sc.Resource
	}
}

// Audit returns the audit records of an entity (its limits, its record,
// resets of its buckets), oldest first. Pass Scope{System: true} (limits
// of the system scope, the namespace's registration and lifecycle) or
// Scope{Resource: r} for changes without an entity.
func (s *Store) Audit(ctx context.Context, sc Scope) ([]AuditRecord, error) {
	ns := s.tbl.NsOr(sc.Namespace)
	var out []AuditRecord
	err := s.tbl.Query(ctx, "query audit", &dynamodb.QueryInput{
		KeyConditionExpression:    aws.String("#p = :p AND begins_with(#s, :s)"),
		ExpressionAttributeNames:  map[string]string{"#p": item.AttrPK, "#s": item.AttrSK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":p": item.StrAV(item.AuditPK(ns, auditEntity(sc))), ":s": item.StrAV("#AUDIT#")},
		ConsistentRead:            aws.Bool(true),
	}, func(items []map[string]types.AttributeValue) {
		for _, it := range items {
			out = append(out, AuditRecord{
				ID: strings.TrimPrefix(item.GetS(it, item.AttrSK), "#AUDIT#"), At: time.UnixMilli(item.GetN(it, attrAt)),
				Action: item.GetS(it, attrAction), Scope: item.GetS(it, attrScope), Before: item.GetS(it, attrBefore), After: item.GetS(it, attrAfter),
				Principal: item.GetS(it, attrPrincipal),
			})
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// newULID returns a ULID: 48 bits of unix ms and 80 random bits in
// Crockford base32, so ids sort by time.
func newULID(t time.Time) string {
	const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
	var b [16]byte
	ms := uint64(t.UnixMilli())
	for i := 5; i >= 0; i-- {
		b[i] = byte(ms)
		ms >>= 8
	}
	_, _ = rand.Read(b[6:])
	// 128 bits → 26 base32 characters.
	var out [26]byte
	hi := uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 | uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7])
	lo := uint64(b[8])<<56 | uint64(b[9])<<48 | uint64(b[10])<<40 | uint64(b[11])<<32 | uint64(b[12])<<24 | uint64(b[13])<<16 | uint64(b[14])<<8 | uint64(b[15])
	for i := 25; i >= 0; i-- {
		out[i] = alphabet[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
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
	it, err := s.tbl.Get(ctx, item.VersionPK, item.NamespaceSK(name))
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
	cctx, cancel := s.tbl.Call(ctx)
	defer cancel()
	_, err = s.api.TransactWriteItems(cctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: aws.String(s.cfg.Table), Item: byName, ConditionExpression: cond, ExpressionAttributeNames: names}},
		{Put: &types.Put{TableName: aws.String(s.cfg.Table), Item: byID, ConditionExpression: cond, ExpressionAttributeNames: names}},
	}})
	if err != nil {
		if cerr := Classify("register namespace", err); errors.Is(cerr, errCondition) {
			return s.RegisterNamespace(ctx, name) // registered concurrently
		} else {
			return Namespace{}, cerr
		}
	}
	if err := s.audit(ctx, name, Scope{System: true}, "namespace.register", "", "name="+name+" id="+id); err != nil {
		return Namespace{}, err
	}
	return Namespace{Name: name, ID: id, State: NamespaceActive}, nil
}

// Namespaces lists registered namespaces by name.
func (s *Store) Namespaces(ctx context.Context) ([]Namespace, error) {
	var out []Namespace
	err := s.tbl.Query(ctx, "list namespaces", &dynamodb.QueryInput{
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
