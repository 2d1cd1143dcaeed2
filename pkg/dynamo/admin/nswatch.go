package admin

import (
	"context"
	"sort"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/dynalimit/dynalimit/pkg/dynamo"
	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
)

// NamespaceStates reads the registry records of names (one GetItem each,
// eventually consistent: the service's read, which a namespace-scoped
// policy grants on _/SYSTEM#) and returns the state of each registered
// one; a name without a record is absent.
func (s *Store) NamespaceStates(ctx context.Context, names []string) (map[string]string, error) {
	out := make(map[string]string, len(names))
	for _, name := range names {
		cctx, cancel := s.t.Call(ctx)
		res, err := s.t.API.GetItem(cctx, &dynamodb.GetItemInput{TableName: aws.String(s.t.Name), Key: item.Key(item.VersionPK, item.NamespaceSK(name))})
		cancel()
		if err != nil {
			return nil, dynamo.Classify("get namespace "+name, err)
		}
		if len(res.Item) > 0 {
			out[name] = namespaceOf(res.Item).State
		}
	}
	return out, nil
}

// DeletedNamespaces is the set of namespaces the registry holds deleted or
// purged, as a replica last read it (Refresh): the service decides nothing
// for their rules while they are in it. The empty namespace is the
// deployment's. Safe for concurrent use; Deleted is one atomic load and a
// map lookup.
type DeletedNamespaces struct {
	deployment string
	set        atomic.Pointer[map[string]bool]
}

// NewDeletedNamespaces returns an empty set; deployment names the
// namespace of rules without one (Config.Namespace).
func NewDeletedNamespaces(deployment string) *DeletedNamespaces {
	if deployment == "" {
		deployment = dynamo.DefaultNamespace
	}
	return &DeletedNamespaces{deployment: deployment}
}

// Deleted reports whether namespace ns ("" the deployment's) was deleted
// or purged at the last Refresh.
func (d *DeletedNamespaces) Deleted(ns string) bool {
	m := d.set.Load()
	if m == nil || len(*m) == 0 {
		return false
	}
	if ns == "" {
		ns = d.deployment
	}
	return (*m)[ns]
}

// Names returns the namespaces deleted at the last Refresh, sorted.
func (d *DeletedNamespaces) Names() []string {
	m := d.set.Load()
	if m == nil {
		return nil
	}
	out := make([]string, 0, len(*m))
	for n := range *m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// StateReader reads the states of registered namespaces: *Store, or
// another store's registry (the Redis store's) that keeps the same
// states.
type StateReader interface {
	// NamespaceStates returns the state of each of names that is
	// registered (NamespaceActive, NamespaceDeleted, NamespacePurged).
	NamespaceStates(ctx context.Context, names []string) (map[string]string, error)
}

var _ StateReader = (*Store)(nil)

// Refresh reads the registry records of names ("" the deployment's) from
// st and replaces the set with those deleted or purged. On an error the
// set read last stays.
func (d *DeletedNamespaces) Refresh(ctx context.Context, st StateReader, names []string) error {
	resolved := make([]string, 0, len(names))
	for _, n := range names {
		if n == "" {
			n = d.deployment
		}
		resolved = append(resolved, n)
	}
	states, err := st.NamespaceStates(ctx, resolved)
	if err != nil {
		return err
	}
	m := map[string]bool{}
	for n, state := range states {
		if state == NamespaceDeleted || state == NamespacePurged {
			m[n] = true
		}
	}
	d.set.Store(&m)
	return nil
}
