package architecture

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// module is the module's path, as go.mod names it.
const module = "github.com/dynalimit/dynalimit"

const (
	// maxMethods bounds the methods of one type: every method declared
	// on T or *T, exported or not (methods promoted from embedded fields
	// are the embedded type's).
	maxMethods = 60
	// maxLines bounds the lines of code of one package: the lines of its
	// non-test .go files that are neither blank nor only a comment (see
	// codeLines).
	maxLines = 4000
)

// The layers imports must point down through, lowest first. The module's
// tiers: pkg/* never imports internal/* or cmd/*, internal/* never imports
// cmd/* (examples/* may import all three). The rooms of pkg/dynamo:
// pkg/dynamo/item is below pkg/dynamo, which is below pkg/dynamo/admin and
// pkg/dynamo/usage; two rooms of one floor do not import each other.
var (
	tiers = []string{"pkg", "internal", "cmd", "examples"}
	rooms = [][]string{{"pkg/dynamo/item"}, {"pkg/dynamo"}, {"pkg/dynamo/admin", "pkg/dynamo/usage"}}
)

// pkgFile is one parsed non-test file of the module.
type pkgFile struct {
	dir  string // the package's directory, relative to the module's root
	file *ast.File
	src  []byte
}

// parseModule parses every non-test .go file of the module, skipping
// testdata and hidden directories.
func parseModule(t *testing.T) (*token.FileSet, []pkgFile) {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("the module's root: %v", err)
	}
	fset := token.NewFileSet()
	var out []pkgFile
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, path, src, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		out = append(out, pkgFile{dir: filepath.ToSlash(rel), file: f, src: src})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("no Go files found")
	}
	return fset, out
}

// TestMethodsPerType: no type of the module has more than maxMethods
// methods.
func TestMethodsPerType(t *testing.T) {
	_, files := parseModule(t)
	count := map[string]int{}
	for _, pf := range files {
		for _, d := range pf.file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || len(fn.Recv.List) == 0 {
				continue
			}
			count[pf.dir+"."+receiverName(fn.Recv.List[0].Type)]++
		}
	}
	most, at := 0, ""
	for typ, n := range count {
		if n > most {
			most, at = n, typ
		}
		if n > maxMethods {
			t.Errorf("%s has %d methods, more than %d: give some of its jobs to a type of their own", typ, n, maxMethods)
		}
	}
	t.Logf("most methods: %s, %d", at, most)
}

// receiverName is the name of the type a method is declared on.
func receiverName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return "?"
		}
	}
}

// TestLinesPerPackage: no package holds more than maxLines lines of code
// in its non-test files, counted as maxLines says.
func TestLinesPerPackage(t *testing.T) {
	fset, files := parseModule(t)
	lines := map[string]int{}
	for _, pf := range files {
		lines[pf.dir] += codeLines(fset, pf)
	}
	dirs := make([]string, 0, len(lines))
	for d := range lines {
		dirs = append(dirs, d)
	}
	sort.Slice(dirs, func(i, j int) bool { return lines[dirs[i]] > lines[dirs[j]] })
	for _, d := range dirs {
		if lines[d] > maxLines {
			t.Errorf("package %s holds %d lines of code, more than %d: split it by job", d, lines[d], maxLines)
		}
	}
	t.Logf("largest package: %s, %d lines of code", dirs[0], lines[dirs[0]])
}

// codeLines counts the lines of pf that are neither blank nor only a
// comment: a line that starts with "//", or that a /* */ comment covers
// with no code beside it, is a comment.
func codeLines(fset *token.FileSet, pf pkgFile) int {
	tf := fset.File(pf.file.Pos())
	block := map[int]bool{} // lines that a /* */ comment touches
	for _, g := range pf.file.Comments {
		for _, c := range g.List {
			if !strings.HasPrefix(c.Text, "/*") {
				continue
			}
			for l := tf.Line(c.Pos()); l <= tf.Line(c.End()); l++ {
				block[l] = true
			}
		}
	}
	n := 0
	for i, line := range strings.Split(string(pf.src), "\n") {
		text := strings.TrimSpace(line)
		if text == "" || strings.HasPrefix(text, "//") || block[i+1] && !hasCodeOutside(text) {
			continue
		}
		n++
	}
	return n
}

// hasCodeOutside reports whether a line that a /* */ comment touches has
// code beside the comment (a rough test: code before "/*" or after "*/").
func hasCodeOutside(text string) bool {
	if i := strings.Index(text, "/*"); i > 0 {
		return true
	}
	if i := strings.Index(text, "*/"); i >= 0 && strings.TrimSpace(text[i+2:]) != "" {
		return true
	}
	return false
}

// tier returns the tier of the package in dir (-1: none).
func tier(dir string) int {
	top, _, _ := strings.Cut(dir, "/")
	for i, t := range tiers {
		if t == top {
			return i
		}
	}
	return -1
}

// room returns the floor of pkg/dynamo that the package in dir is on (-1:
// none: it is not one of pkg/dynamo's rooms).
func room(dir string) int {
	for i, names := range rooms {
		for _, n := range names {
			if dir == n {
				return i
			}
		}
	}
	return -1
}

// TestImportsPointDown: no package imports one on a floor above its own,
// and no two packages import each other.
func TestImportsPointDown(t *testing.T) {
	_, files := parseModule(t)
	imports := map[string]map[string]bool{}
	for _, pf := range files {
		for _, is := range pf.file.Imports {
			path, err := strconv.Unquote(is.Path.Value)
			if err != nil {
				t.Fatal(err)
			}
			dep, ok := strings.CutPrefix(path, module+"/")
			if !ok {
				continue
			}
			if imports[pf.dir] == nil {
				imports[pf.dir] = map[string]bool{}
			}
			imports[pf.dir][dep] = true
		}
	}
	for pkg, deps := range imports {
		from := tier(pkg)
		if from < 0 {
			t.Errorf("package %s is in no tier: name its top directory in tiers", pkg)
			continue
		}
		for dep := range deps {
			if to := tier(dep); to > from {
				t.Errorf("%s (%s) imports %s (%s), a tier above it", pkg, tiers[from], dep, tiers[to])
			}
			if r, d := room(pkg), room(dep); r >= 0 && d >= r {
				t.Errorf("%s (floor %d of pkg/dynamo) imports %s (floor %d): a room imports only rooms below it", pkg, r, dep, d)
			}
			if imports[dep][pkg] {
				t.Errorf("%s and %s import each other", pkg, dep)
			}
		}
	}
	if len(imports["pkg/dynamo/admin"]) == 0 || !imports["pkg/dynamo"]["pkg/dynamo/item"] {
		t.Errorf("the rooms of pkg/dynamo are not as rooms names them: update rooms")
	}
}
