package docscheck

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/roster-go/roster/conformance"
)

var update = flag.Bool("update", false, "rewrite the generated parts of docs/architecture.md")

const root = "../.."

// TestArchitectureIsTrue compares each generated block of
// docs/architecture.md with what the code gives now.
func TestArchitectureIsTrue(t *testing.T) {
	path := filepath.Join(root, "docs", "architecture.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pkgs := scan(t)
	blocks := map[string]string{
		"exports":  exportsTable(pkgs),
		"backends": backendsTable(pkgs),
		"checks":   fmt.Sprintf("`conformance.Run(t, harness)` runs %d named checks", len(conformance.Names())),
	}
	got := doc
	for _, name := range slices.Sorted(maps.Keys(blocks)) {
		old, err := block(doc, name)
		if err != nil {
			t.Fatal(err)
		}
		if name == "backends" && nearly(old, blocks[name]) {
			continue // sizes within 10%: not worth a rewrite on every change
		}
		got, err = replaceBlock(got, name, blocks[name])
		if err != nil {
			t.Fatal(err)
		}
	}
	if bytes.Equal(got, doc) {
		return
	}
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("docs/architecture.md is out of date with the code; run go test ./internal/docscheck -update and review the diff")
}

// nearly reports whether two renderings of a table differ only in numbers,
// each within 10% (or 5) of the other.
func nearly(a, b string) bool {
	num := regexp.MustCompile(`[0-9]+`)
	if num.ReplaceAllString(a, "#") != num.ReplaceAllString(b, "#") {
		return false
	}
	na, nb := num.FindAllString(a, -1), num.FindAllString(b, -1)
	for i := range na {
		x, _ := strconv.Atoi(na[i])
		y, _ := strconv.Atoi(nb[i])
		if d := max(x-y, y-x); d > 5 && d*10 > y {
			return false
		}
	}
	return true
}

// TestCitedDocsExist: every docs/…md path named in the module's code
// and docs exists.
func TestCitedDocsExist(t *testing.T) {
	cite := regexp.MustCompile(`docs/[A-Za-z0-9_./-]+\.md`)
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && p != root {
			return filepath.SkipDir
		}
		if d.IsDir() && d.Name() == "research" {
			return filepath.SkipDir // notes that cite other projects' docs/ trees
		}
		if d.IsDir() || !(strings.HasSuffix(p, ".go") || strings.HasSuffix(p, ".md")) {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, c := range cite.FindAll(b, -1) {
			if _, err := os.Stat(filepath.Join(root, string(c))); err != nil {
				t.Errorf("%s cites %s, which does not exist", p, c)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// pkg is one directory of non-test Go files.
type pkg struct {
	dir     string // relative to the module root
	name    string
	exports int
	lines   int
}

func scan(t *testing.T) map[string]*pkg {
	t.Helper()
	pkgs := map[string]*pkg{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); p != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "tools") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(p))
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, src, 0)
		if err != nil {
			return err
		}
		k := pkgs[rel]
		if k == nil {
			k = &pkg{dir: filepath.ToSlash(rel), name: f.Name.Name}
			pkgs[rel] = k
		}
		k.lines += bytes.Count(src, []byte("\n"))
		k.exports += exported(f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

// exported counts a file's exported top-level names and the exported
// methods of its exported types.
func exported(f *ast.File) int {
	n := 0
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Name.IsExported() && (d.Recv == nil || exportedRecv(d.Recv.List[0].Type)) {
				n++
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						n++
					}
				case *ast.ValueSpec:
					for _, id := range s.Names {
						if id.IsExported() {
							n++
						}
					}
				}
			}
		}
	}
	return n
}

func exportedRecv(t ast.Expr) bool {
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.Ident:
			return x.IsExported()
		default:
			return false
		}
	}
}

// public reports whether a package is part of the API users import.
func public(k *pkg) bool {
	return k.name != "main" && k.exports > 0 && !slices.Contains(strings.Split(k.dir, "/"), "internal")
}

func exportsTable(pkgs map[string]*pkg) string {
	var b strings.Builder
	b.WriteString("| package | exported names |\n|---|---|\n")
	total := 0
	for _, dir := range slices.Sorted(maps.Keys(pkgs)) {
		k := pkgs[dir]
		if !public(k) {
			continue
		}
		fmt.Fprintf(&b, "| `%s` | %d |\n", k.dir, k.exports)
		total += k.exports
	}
	fmt.Fprintf(&b, "| all public packages | %d |\n", total)
	return b.String()
}

// backendsTable lists each backend's driver, its test-server packages
// and its conformance test, in lines.
func backendsTable(pkgs map[string]*pkg) string {
	var b strings.Builder
	b.WriteString("| backend | driver (lines, non-test) | test-server packages | `conformance_test.go` |\n|---|---|---|---|\n")
	for _, dir := range slices.Sorted(maps.Keys(pkgs)) {
		k := pkgs[dir]
		parts := strings.Split(k.dir, "/")
		if len(parts) != 2 || parts[0] != "backends" || parts[1] == "all" || parts[1] == "internal" {
			continue
		}
		var servers []string
		for _, sub := range slices.Sorted(maps.Keys(pkgs)) {
			s := pkgs[sub]
			if strings.HasPrefix(s.dir, k.dir+"/") && !strings.Contains(s.dir, "/internal") || s.dir == "internal/servers/"+testServer(parts[1]) {
				servers = append(servers, fmt.Sprintf("`%s` %d", s.name, s.lines))
			}
		}
		conf := "—"
		if src, err := os.ReadFile(filepath.Join(root, k.dir, "conformance_test.go")); err == nil {
			conf = fmt.Sprint(bytes.Count(src, []byte("\n")))
		}
		if len(servers) == 0 {
			servers = []string{"—"}
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s |\n", parts[1], k.lines, strings.Join(servers, ", "), conf)
	}
	return b.String()
}

// block returns what lies between the markers of name, as replaceBlock
// would write it.
func block(doc []byte, name string) (string, error) {
	begin, end := []byte("<!-- begin "+name+" -->"), []byte("<!-- end "+name+" -->")
	i, j := bytes.Index(doc, begin), bytes.Index(doc, end)
	if i < 0 || j < i {
		return "", fmt.Errorf("docs/architecture.md has no %s…%s block", begin, end)
	}
	return strings.TrimPrefix(string(doc[i+len(begin):j]), "\n"), nil
}

// testServer names the package under internal/servers that runs a
// backend's real server for its tests.
func testServer(backend string) string {
	switch backend {
	case "kubernetes":
		return "kubetest"
	case "zookeeper":
		return "zktest"
	}
	return backend + "test"
}

// replaceBlock puts body between <!-- begin name --> and <!-- end name -->.
func replaceBlock(doc []byte, name, body string) ([]byte, error) {
	begin, end := []byte("<!-- begin "+name+" -->"), []byte("<!-- end "+name+" -->")
	i, j := bytes.Index(doc, begin), bytes.Index(doc, end)
	if i < 0 || j < i {
		return nil, fmt.Errorf("docs/architecture.md has no %s…%s block", begin, end)
	}
	if strings.HasSuffix(body, "\n") {
		body = "\n" + body // a table starts on its own line
	}
	return slices.Concat(doc[:i+len(begin)], []byte(body), doc[j:]), nil
}
