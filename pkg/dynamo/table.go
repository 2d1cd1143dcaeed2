package dynamo

import (
	"context"
	"fmt"

	"github.com/dynalimit/dynalimit/pkg/dynamo/item"
)

// SchemaVersion is the version of the key schema and item layout this
// package reads and writes; NewStore refuses a table with another. Version 2
// stores each limit as a level (tokenbucket.State); tables of version 1
// (token counts with a last-refill time) must be recreated.
const SchemaVersion = "2"

func (s *Store) checkVersion(ctx context.Context) error {
	it, err := s.tbl.Get(ctx, item.VersionPK, item.SKVersion)
	if err != nil {
		return err
	}
	if v := item.GetS(it, "schema"); v != SchemaVersion {
		if v == "" {
			return fmt.Errorf("dynamo: table %s has no schema version record (run `ratelimit table create`): %w", s.cfg.Table, item.ErrSchema)
		}
		return fmt.Errorf("dynamo: table %s has schema version %q, this build reads %q: %w", s.cfg.Table, v, SchemaVersion, item.ErrSchema)
	}
	return nil
}
