package admin

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"
)

var nameArg = argSpec{names: [][2]string{{"NAME", "the namespace's name"}}, of: "NAME", min: 1, max: 1}

// lifecycleVerbs are the namespace group's verbs past register and list.
var lifecycleVerbs = []*verb{{
	name: "show", synopsis: "NAME", summary: "show a namespace's registry record and its lifecycle",
	about: "Prints the namespace's registry record (its id, its state: active,\n" +
		"deleted or purged, and when the state last changed), then its audit\n" +
		"records of registration and lifecycle, oldest first, with who made each.",
	args:     nameArg,
	examples: []string{"ratelimit namespace show team-a"},
	run:      runNamespaceShow,
}, {
	name: "delete", synopsis: "NAME", summary: "soft-delete a namespace: mark it deleted, keep its items",
	about: "Marks the registered namespace NAME deleted in the registry (a\n" +
		"conditional write: only an active namespace is deleted), with an audit\n" +
		"record. Within CONFIG_CACHE_TTL every replica (DynamoDB, Redis) stops deciding\n" +
		"for it: a descriptor whose rule is in NAME is answered as one no rule\n" +
		"matches (OK, no limit), and its buckets are not touched (nor limit\n" +
		"overrides while NAME is the replica's NAMESPACE). Its items (buckets,\n" +
		"limits, entities, audit records) are kept: 'namespace recover' undoes it\n" +
		"and the buckets serve again as they were; 'namespace purge' deletes\n" +
		"them. Deleting a deleted namespace says so and exits 0.",
	args:     nameArg,
	flags:    []flagSpec{flagPrincipal},
	examples: []string{"ratelimit namespace delete team-a -principal alice"},
	run:      runNamespaceDelete,
}, {
	name: "recover", synopsis: "NAME", summary: "undo a delete: mark a namespace active again",
	about: "Marks the deleted (or purged) namespace NAME active again, with an\n" +
		"audit record; every replica decides for it again within CONFIG_CACHE_TTL.\n" +
		"A deleted namespace's items were kept: its buckets, limits and entities\n" +
		"serve again as they were. Recovering an active namespace says so and\n" +
		"exits 0.",
	args:     nameArg,
	flags:    []flagSpec{flagPrincipal},
	examples: []string{"ratelimit namespace recover team-a"},
	run:      runNamespaceRecover,
}, {
	name: "orphans", summary: "list namespaces that have items but no registry record",
	about: "Scans the whole table (keys only, but DynamoDB charges a Scan for every\n" +
		"item it reads: about one read unit per 8 KB of table), or on Redis every\n" +
		"key of every master (SCAN), and prints each namespace that has items and\n" +
		"no registry record, with its item count, separated by a tab. Register it\n" +
		"('namespace register') or purge it.",
	examples: []string{"ratelimit namespace orphans"},
	run:      runNamespaceOrphans,
}, {
	name: "purge", synopsis: "NAME -yes", summary: "delete every item of a deleted or unregistered namespace",
	about: "Deletes every item of namespace NAME: its buckets, stored limits,\n" +
		"entities, settlement markers and audit records. It scans the table for\n" +
		"the namespace's keys (the whole table is read: about one read unit per\n" +
		"8 KB) and deletes them 25 a BatchWriteItem (a write unit per item); on\n" +
		"Redis it SCANs every master for the namespace's key prefix and UNLINKs\n" +
		"each page. It prints the count as it goes; other namespaces' items are\n" +
		"not written.\n" +
		"It refuses an active namespace (delete it first) and runs only with -yes.\n" +
		"The namespace is then marked purged in the registry (registered first if\n" +
		"it was an orphan) and one audit record says who purged how many items.\n" +
		"Run it again after a failure: it deletes what is left. Purge CONFIG_CACHE_TTL\n" +
		"after the delete, once no replica decides for the namespace: one still\n" +
		"deciding would write the buckets it needs again.",
	args: nameArg,
	flags: []flagSpec{
		{"yes", "", "confirm: without it, purge deletes nothing and exits 2", func(fs *flag.FlagSet, o *opts) { fs.BoolVar(&o.yes, "yes", false, "") }},
		flagPrincipal,
	},
	check:    checkPurge,
	examples: []string{"ratelimit namespace purge team-a -yes"},
	run:      runNamespacePurge,
}}

func checkPurge(o *opts, args []string) error {
	if !o.yes && len(args) == 1 {
		return fmt.Errorf("purge deletes every item of namespace %s: add -yes to confirm", args[0])
	}
	if !o.yes {
		return errors.New("purge deletes every item of a namespace: name it and add -yes to confirm")
	}
	return nil
}

func runNamespaceShow(ctx context.Context, e *cmdEnv, args []string) error {
	ns, err := e.st.Namespaces.Namespace(ctx, args[0])
	if errors.Is(err, ErrNotFound) {
		return &explained{fmt.Sprintf("namespace %s is not registered ('ratelimit namespace orphans' lists namespaces with items and no record)", args[0]), err}
	}
	if err != nil {
		return err
	}
	fmt.Fprintln(e.out, namespaceLine(ns))
	if e.st.Audit == nil {
		return nil // a registry without audit records: no history to show
	}
	recs, err := e.st.Audit.Audit(ctx, Scope{Namespace: ns.Name, System: true})
	if err != nil {
		return err
	}
	for _, r := range recs {
		if strings.HasPrefix(r.Action, "namespace.") {
			fmt.Fprintf(e.out, "%s %s by %s: %s\n", r.At.UTC().Format(time.RFC3339), r.Action, orDash(r.Principal), r.After)
		}
	}
	return nil
}

// namespaceLine is a namespace's record on one line.
func namespaceLine(ns Namespace) string {
	line := fmt.Sprintf("namespace %s id %s state %s", ns.Name, ns.ID, ns.State)
	if !ns.Changed.IsZero() {
		line += " since " + ns.Changed.UTC().Format(time.RFC3339)
	}
	return line
}

func runNamespaceDelete(ctx context.Context, e *cmdEnv, args []string) error {
	moved, err := e.st.Namespaces.DeleteNamespace(ctx, args[0])
	if err = notRegistered(args[0], err); err != nil {
		return err
	}
	if !moved {
		fmt.Fprintf(e.out, "namespace %s is already deleted\n", args[0])
		return nil
	}
	fmt.Fprintf(e.out, "namespace %s deleted by %s; its items are kept ('ratelimit namespace recover %s' undoes it, 'ratelimit namespace purge %s -yes' deletes them)\n",
		args[0], e.opts.principal, args[0], args[0])
	return nil
}

func runNamespaceRecover(ctx context.Context, e *cmdEnv, args []string) error {
	moved, err := e.st.Namespaces.RecoverNamespace(ctx, args[0])
	if err = notRegistered(args[0], err); err != nil {
		return err
	}
	if !moved {
		fmt.Fprintf(e.out, "namespace %s is already active\n", args[0])
		return nil
	}
	fmt.Fprintf(e.out, "namespace %s recovered by %s: active\n", args[0], e.opts.principal)
	return nil
}

// notRegistered explains ErrNotFound from a lifecycle change of name.
func notRegistered(name string, err error) error {
	if errors.Is(err, ErrNotFound) {
		return &explained{fmt.Sprintf("namespace %s is not registered: register it first ('ratelimit namespace register %s')", name, name), err}
	}
	return err
}

func runNamespaceOrphans(ctx context.Context, e *cmdEnv, _ []string) error {
	orphans, err := e.st.Namespaces.Orphans(ctx)
	if err != nil {
		return err
	}
	if len(orphans) == 0 {
		fmt.Fprintln(e.errOut, "no orphans: every namespace with items is registered")
	}
	for _, o := range orphans {
		fmt.Fprintf(e.out, "%s\t%d\n", o.Name, o.Items)
	}
	return nil
}

func runNamespacePurge(ctx context.Context, e *cmdEnv, args []string) error {
	last := time.Now()
	n, err := e.st.Namespaces.PurgeNamespace(ctx, args[0], func(done int) {
		if time.Since(last) >= time.Second {
			last = time.Now()
			fmt.Fprintf(e.errOut, "namespace %s: %d items deleted so far\n", args[0], done)
		}
	})
	if errors.Is(err, ErrNamespaceActive) {
		return &explained{fmt.Sprintf("namespace %s is active: delete it first ('ratelimit namespace delete %s'), then purge it", args[0], args[0]), err}
	}
	if err != nil {
		return fmt.Errorf("%w (%d items deleted before it: run purge again to delete the rest)", err, n)
	}
	fmt.Fprintf(e.out, "namespace %s purged by %s: %d items deleted\n", args[0], e.opts.principal, n)
	return nil
}
