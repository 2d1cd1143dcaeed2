package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/dynalimit/dynalimit/internal/config"
)

// remoteTimeout bounds a command run through a service's admin API: a
// purge of a large namespace answers only when it is done.
const remoteTimeout = 15 * time.Minute

// remote runs c through the admin API at c.adminURL (-admin_url): the
// flags given on the command line, but the connection's, become the
// call's parameters, NAME its name=, the principal its PrincipalHeader; the
// service runs the command on its own store and settings (the embedded
// store's buckets live in its process). The answer is written as the
// command would write it.
func (c *command) remote(ctx context.Context, stdout, stderr io.Writer) error {
	if c.opts.configDir != "" {
		return usagef(c.name, "-config_dir does not go with -admin_url: the service resolves -domain and -descriptor through its live configuration")
	}
	q := url.Values{}
	c.fs.Visit(func(f *flag.Flag) {
		if _, local := notOverHTTP[f.Name]; local || isConnection(f.Name) && f.Name != "namespace" {
			return
		}
		q.Set(f.Name, f.Value.String())
	})
	if o := c.fs.Lookup("o"); o != nil {
		q.Set("o", o.Value.String()) // the CLI's default, table, not the API's
	}
	for _, a := range c.rest {
		q.Add("name", a)
	}
	u := strings.TrimRight(c.adminURL, "/") + APIPrefix + strings.ReplaceAll(c.name, " ", "/") + "?" + q.Encode()
	ctx, cancel := context.WithTimeout(ctx, remoteTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, apiVerbs[c.name], u, nil)
	if err != nil {
		return &UsageError{Command: c.name, Err: fmt.Errorf("-admin_url %q: %w", c.adminURL, err)}
	}
	req.Header.Set(PrincipalHeader, c.opts.principal)
	resp, err := http.DefaultClient.Do(req)
	if err != nil && c.localAPI {
		return c.noLocalAPI()
	}
	if err != nil {
		return fmt.Errorf("admin API at %s: %w (is ADMIN_API set on the service, and -admin_url its debug listener?)", c.adminURL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("admin API at %s: %w", c.adminURL, err)
	}
	if resp.StatusCode != http.StatusOK {
		return remoteError(c, resp.StatusCode, body)
	}
	if c.fs.Lookup("o") != nil {
		_, err = stdout.Write(body)
		return err
	}
	var text struct{ Output, Notes string }
	if err := json.Unmarshal(body, &text); err != nil {
		return fmt.Errorf("admin API at %s: answer is not the admin API's: %w", c.adminURL, err)
	}
	_, _ = io.WriteString(stderr, text.Notes)
	_, err = io.WriteString(stdout, text.Output)
	return err
}

// remoteError is the error an admin API's answer of status reports: a
// usage error for 400, as the command run here would return.
func remoteError(c *command, status int, body []byte) error {
	var e struct{ Error string }
	if json.Unmarshal(body, &e) != nil || e.Error == "" {
		e.Error = strings.TrimSpace(string(body))
	}
	if status == http.StatusNotFound && !bytes.Contains(body, []byte(`"error"`)) && c.localAPI {
		return c.noLocalAPI()
	}
	if status == http.StatusNotFound && !bytes.Contains(body, []byte(`"error"`)) {
		e.Error = "no admin API: set ADMIN_API=true on the service (" + e.Error + ")"
	}
	if status == http.StatusBadRequest {
		return &UsageError{Command: c.name, Err: errors.New(e.Error)}
	}
	return fmt.Errorf("admin API at %s: %s: %s", c.adminURL, http.StatusText(status), e.Error)
}

// noLocalAPI is the one error of a bucket command on the embedded store
// that no local admin API answers.
func (c *command) noLocalAPI() error {
	return fmt.Errorf("%s keeps its buckets in the service's process, and no admin API answers at %s: run the service with ADMIN_API=true, or set -admin_url to its debug listener", embeddedName, c.adminURL)
}

// LocalAdminURL is the admin API of a service running here with settings
// s: its debug listener, on loopback when DEBUG_HOST listens on every
// address. On the embedded store (BACKEND_TYPE=memory) the bucket
// commands go there when -admin_url is not given.
func LocalAdminURL(s config.Settings) string {
	host := s.DebugHost
	switch host {
	case "", "0.0.0.0", "::", "[::]":
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(strings.Trim(host, "[]"), strconv.Itoa(s.DebugPort))
}

// isConnection reports whether name is a connection flag or its alias.
func isConnection(name string) bool {
	for _, k := range connection {
		if name == k.name || name == k.alias {
			return true
		}
	}
	return false
}
