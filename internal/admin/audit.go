package admin

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

var auditGroup = &group{name: "audit", summary: "DynamoDB, Redis: list who changed limits, entities, namespaces and buckets", job: JobAudit, verbs: []*verb{{
	name: "list", synopsis: "SCOPE", summary: "every audit record of a scope, oldest first, with who made it",
	about: "Prints the audit records kept for SCOPE, oldest first: each change of\n" +
		"its stored limits (limits.set, limits.delete), of its entity record\n" +
		"(entity.put), each reset of its buckets (bucket.reset), and, at -system,\n" +
		"the namespace's registration and lifecycle (namespace.register, .delete,\n" +
		".recover, .purge), with the time, who made it (-principal of the command\n" +
		"that made it, else its $USER; empty for records written before principals\n" +
		"were kept), and what was there before and after. -entity E lists every\n" +
		"record of E, whatever the resource; with -resource R, those of E and R\n" +
		"only. Records are kept until the namespace is purged.",
	args:  argSpec{names: [][2]string{scopeArg}},
	flags: append(append([]flagSpec{}, scopeFlags...), flagOutput),
	check: checkAuditList,
	examples: []string{
		"ratelimit audit list -entity 'generic_key=demo'",
		"ratelimit audit list -system -namespace team-a -o json",
	},
	run: runAuditList,
}}}

func checkAuditList(o *opts, args []string) error {
	if err := checkScopeOnly(o, args); err != nil {
		return err
	}
	if o.output != "table" && o.output != "json" {
		return fmt.Errorf("-o %s: want table or json", o.output)
	}
	return nil
}

func runAuditList(ctx context.Context, e *cmdEnv, _ []string) error {
	sc, _ := scopeOf(&e.opts)
	recs, err := e.st.Audit.Audit(ctx, sc)
	if err != nil {
		return err
	}
	if sc.Entity != "" && sc.Resource != "" {
		// The records of an entity are kept together; keep those of R.
		keep := recs[:0]
		for _, r := range recs {
			if r.Scope == sc.String() {
				keep = append(keep, r)
			}
		}
		recs = keep
	}
	if e.opts.output == "json" {
		return writeAuditJSON(e.out, recs)
	}
	if len(recs) == 0 {
		fmt.Fprintf(e.errOut, "%s: no audit records in namespace %s\n", sc, e.opts.ns)
		return nil
	}
	tw := tabwriter.NewWriter(e.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tPRINCIPAL\tACTION\tSCOPE\tBEFORE\tAFTER")
	for _, r := range recs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.At.UTC().Format(time.RFC3339Nano), orDash(r.Principal), r.Action, r.Scope, orDash(r.Before), orDash(r.After))
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// jsonAudit is an audit record in audit list's JSON.
type jsonAudit struct {
	ID        string    `json:"id"`
	At        time.Time `json:"at"`
	Principal string    `json:"principal"`
	Action    string    `json:"action"`
	Scope     string    `json:"scope"`
	Before    string    `json:"before"`
	After     string    `json:"after"`
}

func writeAuditJSON(w io.Writer, recs []AuditRecord) error {
	out := make([]jsonAudit, 0, len(recs))
	for _, r := range recs {
		out = append(out, jsonAudit{ID: r.ID, At: r.At.UTC(), Principal: r.Principal, Action: r.Action, Scope: r.Scope, Before: r.Before, After: r.After})
	}
	return writeJSON(w, out)
}
