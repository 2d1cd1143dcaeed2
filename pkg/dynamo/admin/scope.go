package admin

import (
	"errors"
	"strconv"

	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
)

// Scope names where stored limits apply. Exactly one form is valid:
// System; Resource alone; Entity alone (the entity's default for every
// resource); Entity and Resource. Resolution for a debit takes the first
// scope that stores a limit of the debit's name: entity+resource, entity
// default, resource, system, and finally the plan's own (YAML) limit.
type Scope struct {
	// Namespace is the scope's namespace; empty is the store's
	// (dynamo.Config.Namespace).
	Namespace string
	System    bool
	Entity    string
	Resource  string
}

// Validate reports whether sc names one scope: the system alone, or a
// resource, an entity, or both.
func (sc Scope) Validate() error {
	switch {
	case sc.System && (sc.Entity != "" || sc.Resource != ""):
		return errors.New("dynamo: scope: system scope takes no entity or resource")
	case !sc.System && sc.Entity == "" && sc.Resource == "":
		return errors.New("dynamo: scope: name the system, a resource, an entity, or an entity and a resource")
	}
	return nil
}

// Key returns the config record's key in namespace ns.
func (sc Scope) Key(ns string) (pk, sk string) {
	switch {
	case sc.System:
		return item.SystemPK(ns), item.SKConfig
	case sc.Entity != "" && sc.Resource != "":
		return item.EntityPK(ns, sc.Entity), item.EntityConfigSK(sc.Resource)
	case sc.Entity != "":
		return item.EntityPK(ns, sc.Entity), item.EntityDefaultSK
	default:
		return item.ResourcePK(ns, sc.Resource), item.SKConfig
	}
}

// String names the scope for logs and audit records.
func (sc Scope) String() string {
	switch {
	case sc.System:
		return "system"
	case sc.Entity != "" && sc.Resource != "":
		return "entity " + strconv.Quote(sc.Entity) + " resource " + strconv.Quote(sc.Resource)
	case sc.Entity != "":
		return "entity " + strconv.Quote(sc.Entity)
	default:
		return "resource " + strconv.Quote(sc.Resource)
	}
}
