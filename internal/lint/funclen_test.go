package lint

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/dynalimit/dynalimit/internal/testutil"
)

// maxFuncLines is the longest a non-test function may run, from its func
// keyword to its closing brace, unless it is a table.
const maxFuncLines = 100

// tooLong lists the functions that ran past maxFuncLines when this check
// was written, keyed by file and name, with their length then. The list
// must only shrink: a listed function may not grow, one split below the
// limit must leave the list, and nothing joins it.
var tooLong = map[string]int{
	"cmd/ratelimit/serve.go run":                    179,
	"internal/config/reload.go Reloader.loop":       106,
	"internal/config/settings.go Settings.Validate": 180,
	"internal/memstore/memstore.go Store.Acquire":   121,
	"pkg/descriptors/parse.go builder.descriptor":   166,
}

// funcLen is one function's extent.
type funcLen struct {
	pos   token.Position // of the func keyword, file relative to the root
	name  string         // Name, or Recv.Name for a method
	lines int
}

func (f funcLen) key() string { return f.pos.Filename + " " + f.name }

func (f funcLen) String() string {
	return fmt.Sprintf("%s:%d %s (%d lines)", f.pos.Filename, f.pos.Line, f.name, f.lines)
}

// TestFunctionLength fails on a non-test function over maxFuncLines lines
// that is not a table, and on an entry of tooLong that grew or is no
// longer needed.
func TestFunctionLength(t *testing.T) {
	root := testutil.RepoRoot(t)
	funcs, err := moduleFuncs(root)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range funcs {
		if f.lines <= maxFuncLines {
			continue
		}
		seen[f.key()] = true
		switch allowed, ok := tooLong[f.key()]; {
		case !ok:
			t.Errorf("%s: over %d lines: split it along the ideas it mixes", f, maxFuncLines)
		case f.lines > allowed:
			t.Errorf("%s: grew past the %d lines tooLong allows it: split it", f, allowed)
		default:
			t.Logf("%s: over %d lines, allowed by tooLong until it is split", f, maxFuncLines)
		}
	}
	for key, n := range tooLong {
		if !seen[key] {
			t.Errorf("tooLong lists %s (%d lines), which is now %d lines or fewer, or gone: remove it from the list", key, n, maxFuncLines)
		}
	}
}

// moduleFuncs returns every function declared in a non-test, non-generated
// .go file under root, tables left out, sorted by position.
func moduleFuncs(root string) ([]funcLen, error) {
	fset := token.NewFileSet()
	var funcs []funcLen
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && path != root {
				return filepath.SkipDir // another module
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		file, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("lint: %w", err)
		}
		if ast.IsGenerated(file) {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return fmt.Errorf("lint: %w", err)
		}
		for _, decl := range file.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil || isTable(fd.Body) {
				continue
			}
			pos := fset.Position(fd.Pos())
			pos.Filename = filepath.ToSlash(rel)
			funcs = append(funcs, funcLen{pos: pos, name: funcName(fd), lines: fset.Position(fd.End()).Line - pos.Line + 1})
		}
		return nil
	})
	sort.Slice(funcs, func(i, j int) bool {
		if funcs[i].pos.Filename != funcs[j].pos.Filename {
			return funcs[i].pos.Filename < funcs[j].pos.Filename
		}
		return funcs[i].pos.Line < funcs[j].pos.Line
	})
	return funcs, err
}

// funcName returns Name, or Recv.Name for a method.
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	typ := fd.Recv.List[0].Type
	for {
		switch x := typ.(type) {
		case *ast.StarExpr:
			typ = x.X
			continue
		case *ast.IndexExpr:
			typ = x.X
			continue
		case *ast.IndexListExpr:
			typ = x.X
			continue
		case *ast.Ident:
			return x.Name + "." + fd.Name.Name
		}
		return fd.Name.Name
	}
}

// isTable reports whether body only builds data: a single return of
// composite literals, or variables set to composite literals and then
// returned.
func isTable(body *ast.BlockStmt) bool {
	if len(body.List) == 0 {
		return false
	}
	for i, stmt := range body.List {
		last := i == len(body.List)-1
		switch s := stmt.(type) {
		case *ast.ReturnStmt:
			if !last || len(s.Results) == 0 {
				return false
			}
			for _, r := range s.Results {
				if !isLiteral(r) && !(i > 0 && isIdent(r)) {
					return false
				}
			}
		case *ast.DeclStmt:
			gd, ok := s.Decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR || last {
				return false
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				if len(vs.Values) == 0 || !allLiterals(vs.Values) {
					return false
				}
			}
		case *ast.AssignStmt:
			if s.Tok != token.DEFINE || last || !allLiterals(s.Rhs) {
				return false
			}
		default:
			return false
		}
	}
	return true
}

func allLiterals(exprs []ast.Expr) bool {
	for _, e := range exprs {
		if !isLiteral(e) {
			return false
		}
	}
	return true
}

// isLiteral reports whether e is a composite literal, or the address of
// one.
func isLiteral(e ast.Expr) bool {
	if u, ok := e.(*ast.UnaryExpr); ok && u.Op == token.AND {
		e = u.X
	}
	_, ok := ast.Unparen(e).(*ast.CompositeLit)
	return ok
}

func isIdent(e ast.Expr) bool {
	_, ok := e.(*ast.Ident)
	return ok
}

func TestIsTable(t *testing.T) {
	tests := []struct {
		name string
		body string
		want bool
	}{
		{"a returned literal", "return []int{1, 2}", true},
		{"a returned pointer to a literal", "return &T{A: 1}", true},
		{"a var table returned", "var t = map[string]int{\"a\": 1}\nreturn t", true},
		{"a defined table returned", "t := []T{{A: 1}}\nreturn t", true},
		{"two literals returned", "return T{}, []int{}", true},
		{"a call returned", "return f()", false},
		{"a bare identifier returned", "return t", false},
		{"a statement before the table", "f()\nreturn []int{}", false},
		{"a table not returned", "t := []int{}\n_ = t", false},
		{"a var without a value", "var t []int\nreturn t", false},
		{"empty", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := "package p\nfunc f() any {\n" + tt.body + "\n}\n"
			file, err := parser.ParseFile(token.NewFileSet(), "p.go", src, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			if got := isTable(file.Decls[0].(*ast.FuncDecl).Body); got != tt.want {
				t.Errorf("isTable(%q) = %v, want %v", tt.body, got, tt.want)
			}
		})
	}
}

func TestFuncName(t *testing.T) {
	src := "package p\nfunc f() {}\nfunc (s S) v() {}\nfunc (s *S) p() {}\nfunc (g *G[K]) k() {}\nfunc (m M[K, V]) kv() {}\n"
	file, err := parser.ParseFile(token.NewFileSet(), "p.go", src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"f", "S.v", "S.p", "G.k", "M.kv"}
	for i, d := range file.Decls {
		if got := funcName(d.(*ast.FuncDecl)); got != want[i] {
			t.Errorf("funcName(%s) = %q, want %q", want[i], got, want[i])
		}
	}
}
