package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dynalimit/dynalimit/internal/testutil"
)

// pageConfig has a bucket of 3 a minute and a $1 daily budget priced
// $0.65 a request.
const pageConfig = `domain: page
descriptors:
  - key: generic_key
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000}
`

const pageBudget = `domain: shop
prices:
  input_key: llm_input_token
  output_key: llm_output_token
  default: {input: 1, output: 1, request: "0.65"}
descriptors:
  - key: team
    budget: {name: team_day, usd: 1, per: day, zone: America/New_York}
`

// post sends one decision over HTTP and returns its status.
func post(t *testing.T, addr, body string) int {
	t.Helper()
	resp, err := http.Post("http://"+addr+"/json", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// apiJSON reads one admin API call's JSON into v.
func apiJSON(t *testing.T, u string, v any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, v) != nil {
		t.Fatalf("GET %s = %d %s", u, resp.StatusCode, body)
	}
}

// cell is the text of the cell of class or position in the row of limit
// name of the level's table, in a DOM Chromium dumped.
func cell(t *testing.T, dom string, level int, limit string, col int) string {
	t.Helper()
	re := regexp.MustCompile(`(?s)<table class="level" data-level="` + fmt.Sprint(level) + `".*?<tr data-limit="` + regexp.QuoteMeta(limit) + `">(.*?)</tr>`)
	m := re.FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("no row for limit %s at level %d in the page:\n%s", limit, level, dom)
	}
	cells := regexp.MustCompile(`<td[^>]*>(.*?)</td>`).FindAllStringSubmatch(m[1], -1)
	if col >= len(cells) {
		t.Fatalf("row %s has %d cells", limit, len(cells))
	}
	return cells[col][1]
}

// TestPageInChromiumEmbedded drives headless Chromium against the binary
// on the embedded store with ADMIN_API: a bucket drained by 3 calls shows 0
// remaining, and its refill after a reset by the command the page shows; a
// $1 budget $0.65 spent shows 0.35 remaining and its period's end; hostile
// descriptor values are escaped in the DOM; the page's figures are the
// admin API's; screenshots at 1280×800 and a phone's width. Without
// ADMIN_API the page is 404.
func TestPageInChromiumEmbedded(t *testing.T) {
	chromium(t)
	dir := t.TempDir()
	writeConfig(t, dir, "page.yaml", pageConfig)
	writeConfig(t, dir, "shop.yaml", pageBudget)
	p := startBinary(t, dir, "ADMIN_API=true")
	base := "http://" + p.DebugAddr()
	for range 3 {
		if code := post(t, p.HTTPAddr(), `{"domain":"page","descriptors":[{"entries":[{"key":"generic_key","value":"drain"}]}]}`); code != 200 {
			t.Fatalf("decision = %d, want 200", code)
		}
	}
	if code := post(t, p.HTTPAddr(), `{"domain":"shop","descriptors":[{"entries":[{"key":"team","value":"ml"},{"key":"llm_input_token","value":"0"},{"key":"llm_output_token","value":"0"}]}]}`); code != 200 {
		t.Fatalf("budget decision = %d, want 200", code)
	}

	bucketURL := base + "/admin/page/?" + url.Values{"domain": {"page"}, "descriptor": {"generic_key=drain"}}.Encode()
	d := dom(t, bucketURL)
	if got := cell(t, d, 0, "default", 4); got != "0" {
		t.Errorf("remaining of a bucket drained by 3 calls = %q, want 0", got)
	}
	var shown []struct {
		Limits []struct {
			Name     string  `json:"name"`
			Tokens   float64 `json:"tokens"`
			Capacity float64 `json:"capacity"`
		} `json:"limits"`
	}
	apiJSON(t, base+"/admin/bucket/show?domain=page&descriptor=generic_key=drain", &shown)
	if len(shown) != 1 || len(shown[0].Limits) != 1 || fmt.Sprint(shown[0].Limits[0].Capacity) != cell(t, d, 0, "default", 2) {
		t.Errorf("page's capacity %q, admin API's %+v: want the same", cell(t, d, 0, "default", 2), shown)
	}
	if tok := cell(t, d, 0, "default", 1); shown[0].Limits[0].Tokens > 0.5 || !strings.HasPrefix(tok, "0") {
		t.Errorf("page's tokens %q, admin API's %v: want both near 0", tok, shown[0].Limits[0].Tokens)
	}
	cmdLine := regexp.MustCompile(`(?s)<pre id="reset-command">(.*?)</pre>`).FindStringSubmatch(d)
	if cmdLine == nil || !strings.Contains(cmdLine[1], "ratelimit bucket reset -domain &#39;page&#39;") && !strings.Contains(cmdLine[1], "ratelimit bucket reset -domain 'page'") {
		t.Fatalf("no reset command in the page:\n%s", d)
	}
	line := strings.NewReplacer("&#39;", "'", "&amp;", "&", "&quot;", `"`).Replace(cmdLine[1])
	reset := exec.Command("sh", "-c", strings.Replace(line, "ratelimit ", testutil.Binary(t)+" ", 1))
	if out, err := reset.CombinedOutput(); err != nil || !strings.Contains(string(out), "reset to full") {
		t.Fatalf("the page's reset command %q = %s, %v", line, out, err)
	}
	if got := cell(t, dom(t, bucketURL), 0, "default", 4); got != "3" {
		t.Errorf("remaining after the page's reset command = %q, want 3", got)
	}

	budgetURL := base + "/admin/page/?" + url.Values{"domain": {"shop"}, "descriptor": {"team=ml"}}.Encode()
	bd := dom(t, budgetURL)
	if got := cell(t, bd, 0, "team_day", 4); got != "0.35" {
		t.Errorf("remaining of a $1 budget $0.65 spent = %q, want 0.35", got)
	}
	if got := cell(t, bd, 0, "team_day", 3); got != "0.65" {
		t.Errorf("spent = %q, want 0.65", got)
	}
	ny, _ := time.LoadLocation("America/New_York")
	now := time.Now().In(ny)
	end := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, ny)
	if got, want := cell(t, bd, 0, "team_day", 5), "period ends "+end.Format("2006-01-02 15:04 MST")+" (America/New_York)"; got != want {
		t.Errorf("budget's reset = %q, want %q", got, want)
	}

	hostile := "generic_key=<script>alert(1)</script>\"'\xff"
	hd := dom(t, base+"/admin/page/?"+url.Values{"domain": {"page"}, "descriptor": {hostile}}.Encode())
	if strings.Contains(strings.ToLower(hd), "<script") {
		t.Errorf("a descriptor value with <script> reached the DOM as an element:\n%s", hd)
	}
	if !strings.Contains(hd, "&lt;script&gt;alert(1)&lt;/script&gt;") || !strings.Contains(hd, "\uFFFD") {
		t.Errorf("the hostile value is not shown escaped (with U+FFFD for the invalid byte):\n%s", hd)
	}

	screenshots(t, budgetURL)

	off := startBinary(t, dir)
	resp, err := http.Get("http://" + off.DebugAddr() + "/admin/page/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("the page without ADMIN_API = %d, want 404", resp.StatusCode)
	}
}

// TestPageInChromiumDynamoDB drives headless Chromium against a replica
// on DynamoDB Local with the aggregator beside it (pageOnSharedStore).
func TestPageInChromiumDynamoDB(t *testing.T) {
	chromium(t)
	env := dynamoEnv(t, "BACKEND_TIMEOUT=2s") // ON_UNAVAILABLE=local, the default
	dir := t.TempDir()
	writeConfig(t, dir, "page.yaml", pageConfig)
	p := startBinary(t, dir, append(env, "ADMIN_API=true")...)
	startAggregator(t, env)
	pageOnSharedStore(t, p, "on the table")
}

// TestPageInChromiumRedis drives headless Chromium against a replica on a
// redis-server (pageOnSharedStore): the decisions count the usage
// themselves.
func TestPageInChromiumRedis(t *testing.T) {
	chromium(t)
	dir := t.TempDir()
	writeConfig(t, dir, "page.yaml", pageConfig)
	p := startBinary(t, dir, "BACKEND_TYPE=redis", "REDIS_URL="+redisServerAddr(t), "ADMIN_API=true")
	pageOnSharedStore(t, p, "on Redis")
}

// pageOnSharedStore drives the page of p, a replica on a shared store:
// 7 decisions on an entity are 7 in the usage chart's data and first in
// the top consumers, which rank every entity the store's usage holds (no
// top=), as usage summary and usage top say over the admin API; a bucket
// drained by 3 calls shows 0 remaining, decided where (where) and not
// locally now, as bucket show's decided_locally says; screenshots at both
// widths.
func pageOnSharedStore(t *testing.T, p *proc, where string) {
	t.Helper()
	base := "http://" + p.DebugAddr()
	for entity, n := range map[string]int{"u7": 7, "u2": 2} {
		for range n {
			if code := post(t, p.HTTPAddr(), `{"domain":"page","descriptors":[{"entries":[{"key":"user","value":"`+entity+`"}]}]}`); code != 200 {
				t.Fatalf("decision = %d, want 200", code)
			}
		}
	}
	for range 3 {
		if code := post(t, p.HTTPAddr(), `{"domain":"page","descriptors":[{"entries":[{"key":"generic_key","value":"drain"}]}]}`); code != 200 {
			t.Fatalf("decision = %d, want 200", code)
		}
	}
	var summary []struct {
		Limit       string `json:"limit"`
		Millitokens int64  `json:"millitokens"`
	}
	if !testutil.Eventually(60*time.Second, func() bool {
		apiJSON(t, base+"/admin/usage/summary?entity=user=u7&resource=page", &summary)
		return len(summary) == 1 && summary[0].Millitokens == 7000
	}) {
		t.Fatalf("usage summary of u7 = %+v, want 7 tokens once the store counted them", summary)
	}
	var top struct {
		Complete  bool `json:"complete"`
		Consumers []struct {
			Entity string `json:"entity"`
			Tokens string `json:"tokens"`
		} `json:"consumers"`
	}
	// Every decision counted (the aggregator reads the stream a few
	// seconds behind), so that the page, read next, ranks the same.
	want := map[string]string{"user=u7": "7", "user=u2": "2", "generic_key=drain": "3"}
	if !testutil.Eventually(60*time.Second, func() bool {
		apiJSON(t, base+"/admin/usage/top?resource=page&window=hourly", &top)
		got := map[string]string{}
		for _, c := range top.Consumers {
			got[c.Entity] = c.Tokens
		}
		return maps.Equal(got, want)
	}) {
		t.Fatalf("usage top of page = %+v, want %v", top, want)
	}
	if !top.Complete || top.Consumers[0].Entity != "user=u7" || top.Consumers[0].Tokens != "7" {
		t.Errorf("usage top of page = %+v, want user=u7 first with 7, complete", top)
	}
	pageURL := base + "/admin/page/?" + url.Values{"entity": {"user=u7"}, "resource": {"page"}, "domain": {"page"}, "descriptor": {"generic_key=drain"}}.Encode()
	d := dom(t, pageURL)
	if bars := regexp.MustCompile(`data-tokens="([^"]*)"`).FindAllStringSubmatch(d, -1); len(bars) != 1 || bars[0][1] != "7" {
		t.Errorf("usage chart's bars = %q, want one of 7 (usage summary: %d millitokens)", bars, summary[0].Millitokens)
	}
	rows := regexp.MustCompile(`<tr><td>([^<]*)</td><td class="n">([^<]*)</td></tr>`).FindAllStringSubmatch(regexp.MustCompile(`(?s)<table id="top-consumers">.*?</table>`).FindString(d), -1)
	if len(rows) != len(top.Consumers) {
		t.Fatalf("top consumers' rows = %q, want usage top's %+v", rows, top.Consumers)
	}
	for i, c := range top.Consumers {
		if rows[i][1] != c.Entity || rows[i][2] != c.Tokens {
			t.Errorf("top consumers' row %d = %q, want usage top's %s %s", i, rows[i][1:], c.Entity, c.Tokens)
		}
	}
	if got := cell(t, d, 0, "default", 4); got != "0" {
		t.Errorf("remaining of a bucket drained by 3 calls = %q, want 0", got)
	}
	var shown []struct {
		DecidedLocally *bool `json:"decided_locally"`
	}
	apiJSON(t, base+"/admin/bucket/show?domain=page&descriptor=generic_key=drain", &shown)
	if len(shown) != 1 || shown[0].DecidedLocally == nil || *shown[0].DecidedLocally {
		t.Errorf("bucket show's decided_locally = %+v, want false (the store answers)", shown)
	}
	if want := `data-decided-locally="false">Decided ` + where + `: this replica does not decide it locally now`; !strings.Contains(d, want) {
		t.Errorf("the page lacks %q:\n%s", want, d)
	}
	screenshots(t, pageURL)
}
