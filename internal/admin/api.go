package admin

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"net"
	"net/http"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/dynalimit/dynalimit/internal/config"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
)

// apiVerbs are the commands the admin API runs, each with the HTTP method
// it answers: GET for those that only read, POST for those that write.
var apiVerbs = map[string]string{
	"bucket show":        http.MethodGet,
	"bucket reset":       http.MethodPost,
	"bucket topup":       http.MethodPost,
	"usage list":         http.MethodGet,
	"usage summary":      http.MethodGet,
	"usage top":          http.MethodGet,
	"audit list":         http.MethodGet,
	"limits set":         http.MethodPost,
	"limits get":         http.MethodGet,
	"limits delete":      http.MethodPost,
	"entity create":      http.MethodPost,
	"entity show":        http.MethodGet,
	"namespace register": http.MethodPost,
	"namespace list":     http.MethodGet,
	"namespace show":     http.MethodGet,
	"namespace orphans":  http.MethodGet,
	"namespace delete":   http.MethodPost,
	"namespace recover":  http.MethodPost,
	"namespace purge":    http.MethodPost,
}

// PrincipalHeader names who an admin API call's audit records name.
const PrincipalHeader = "X-Dynalimit-Principal"

// APIPrefix is the path the admin API serves under: APIPrefix + "bucket/show".
const APIPrefix = "/admin/"

// notOverHTTP are the flags a call of the admin API may not set: the
// connection is the serving process's, -config_dir would read the
// server's files, the principal comes from PrincipalHeader.
var notOverHTTP = map[string]string{
	"config_dir": "the live configuration resolves -domain and -descriptor",
	"principal":  "name it in the " + PrincipalHeader + " header",
	"admin_url":  "a call of the admin API is already one",
}

// API serves the admin commands over HTTP, on the debug listener when
// ADMIN_API is set: APIPrefix + GROUP/VERB runs `ratelimit GROUP VERB`
// with the query's parameters as its flags (name= for a namespace's
// NAME), on the serving process's store and settings, and answers its
// -o json output (or its text, for -o table). An error about the call is
// 400, a command the store cannot run 501, a missing record 404, an
// active namespace to purge 409, another failure 500, each as
// {"error": "..."}. It is safe for concurrent use.
type API struct {
	settings config.Settings
	st       Stores
	live     func() *descriptors.Config
	log      *logrus.Entry
}

// NewAPI returns the admin API over the serving process's settings s,
// store st (Embedded, or a Dynamo over the store it decides on) and live
// configuration.
func NewAPI(s config.Settings, st Stores, live func() *descriptors.Config, log *logrus.Entry) *API {
	return &API{settings: s, st: st, live: live, log: log.WithField("component", "admin")}
}

// ServeHTTP runs the command the path names (APIPrefix + GROUP/VERB) and
// answers its output or its error.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := strings.ReplaceAll(strings.Trim(strings.TrimPrefix(r.URL.Path, APIPrefix), "/"), "/", " ")
	method, ok := apiVerbs[name]
	if !ok {
		writeError(w, http.StatusNotFound, "no admin command at "+r.URL.Path+": want "+APIPrefix+"GROUP/VERB, e.g. "+APIPrefix+"bucket/show")
		return
	}
	if r.Method != method {
		w.Header().Set("Allow", method)
		writeError(w, http.StatusMethodNotAllowed, name+" takes "+method)
		return
	}
	c, err := a.parse(name, r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	var out, notes bytes.Buffer
	if err := a.run(r.Context(), c, &out, &notes); err != nil {
		a.log.WithError(err).WithField("command", name).Warn("admin call failed")
		writeError(w, statusOf(err), err.Error())
		return
	}
	if c.fs.Lookup("o") == nil {
		// A command that prints text: its lines, and what it says aside.
		w.Header().Set("Content-Type", "application/json")
		_ = writeJSON(w, struct {
			Output string `json:"output"`
			Notes  string `json:"notes,omitempty"`
		}{out.String(), notes.String()})
		return
	}
	if c.opts.output == "json" {
		w.Header().Set("Content-Type", "application/json")
	} else {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	}
	_, _ = w.Write(out.Bytes())
}

// parse reads the call's query as the command line of name: each
// parameter a flag (-o json unless given), name= the NAME argument.
func (a *API) parse(name string, r *http.Request) (*command, error) {
	g, verb, _ := strings.Cut(name, " ")
	c := &command{g: findGroup(g), name: name, settings: a.settings}
	c.v = c.g.find(verb)
	c.fs = c.flagSet(func(fs *flag.FlagSet) {
		fs.StringVar(&c.settings.Namespace, "namespace", c.settings.Namespace, "")
	})
	q := r.URL.Query()
	var args, rest []string
	if c.fs.Lookup("o") != nil {
		args = append(args, "-o=json")
	}
	for k, vs := range q {
		if why, ok := notOverHTTP[k]; ok {
			return nil, errors.New(k + " is not a parameter of the admin API: " + why)
		}
		for _, v := range vs {
			if k == "name" && len(c.v.args.names) > 0 {
				rest = append(rest, v)
				continue
			}
			args = append(args, "-"+k+"="+v)
		}
	}
	if _, err := parseInterleaved(c.fs, args); err != nil {
		msg := strings.NewReplacer("unknown flag -", "unknown parameter ", "did you mean -", "did you mean ").Replace(FlagError(err, c.fs).Error())
		return nil, &UsageError{Command: name, Err: errors.New(msg)}
	}
	if err := c.check(rest); err != nil {
		return nil, err
	}
	c.opts.ns = c.settings.Namespace
	c.opts.principal = r.Header.Get(PrincipalHeader)
	if c.opts.principal == "" {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		c.opts.principal = "admin-api@" + host
	}
	return c, nil
}

// run runs c on the serving process's store.
func (a *API) run(ctx context.Context, c *command, out, notes *bytes.Buffer) error {
	return c.runOn(ctx, a.st, a.live, out, notes)
}

// statusOf is the HTTP status of a command's error.
func statusOf(err error) int {
	switch {
	case errors.Is(err, ErrUnsupported):
		return http.StatusNotImplemented
	case errors.Is(err, ErrUsage):
		return http.StatusBadRequest
	case errors.Is(err, ErrNotFound), errors.Is(err, errNoRule):
		return http.StatusNotFound
	case errors.Is(err, ErrNamespaceActive):
		return http.StatusConflict
	}
	return http.StatusInternalServerError
}

// writeError answers {"error": msg} with status.
func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = writeJSON(w, struct {
		Error string `json:"error"`
	}{msg})
}
