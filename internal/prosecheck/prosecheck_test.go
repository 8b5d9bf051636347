package prosecheck

import (
	"go/ast"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxDocLines bounds a package doc. The anchors (Go's standard library,
// gocloud.dev, grpc-go) run 13 to 48 lines. Longer design notes go in docs/.
const maxDocLines = 50

// maxWordsPerSentence bounds a package doc's average sentence. The anchors
// average 11 to 14 words. The bound leaves room for a doc of few sentences.
const maxWordsPerSentence = 20

// TestPackageDocs checks every non-internal package in the module. Its doc
// must exist, open with "Package name" or "Command name", and stay within
// maxDocLines. Its sentences must average at most maxWordsPerSentence
// words, and each paragraph must end at a full stop.
func TestPackageDocs(t *testing.T) {
	root := moduleRoot(t)
	var total stats
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if skipDir(rel, d.Name()) || nestedModule(path, rel) {
			return filepath.SkipDir
		}
		pkg, ok := parsePackage(t, path)
		if !ok {
			return nil
		}
		s := checkPackage(t, rel, pkg)
		total.add(s)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("all: %.1f words per sentence, %.1f colons per 1,000 words",
		total.wordsPerSentence(), total.colonsPerKWords())
}

// skipDir reports whether the walk leaves out a directory and all below it.
func skipDir(rel, name string) bool {
	if rel == "." {
		return false
	}
	return name == "testdata" || name == "internal" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")
}

// nestedModule reports whether a directory below the root holds a module
// of its own, such as bench or tools/kube.
func nestedModule(path, rel string) bool {
	if rel == "." {
		return false
	}
	_, err := os.Stat(filepath.Join(path, "go.mod"))
	return err == nil
}

// pkgDoc is the doc comment of one package, taken from its longest one.
type pkgDoc struct {
	name  string
	doc   *ast.CommentGroup
	lines int
}

// parsePackage reads the non-test files of dir. It reports false for a
// directory with no Go package.
func parsePackage(t *testing.T, dir string) (pkgDoc, bool) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var p pkgDoc
	found := false
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.ParseComments|parser.PackageClauseOnly)
		if err != nil {
			t.Fatal(err)
		}
		found = true
		p.name = f.Name.Name
		if f.Doc == nil {
			continue
		}
		lines := fset.Position(f.Doc.End()).Line - fset.Position(f.Doc.Pos()).Line + 1
		if lines > p.lines {
			p.doc, p.lines = f.Doc, lines
		}
	}
	return p, found
}

// checkPackage reports the faults of one package doc and logs its figures.
func checkPackage(t *testing.T, rel string, p pkgDoc) stats {
	t.Helper()
	if p.doc == nil {
		t.Errorf("%s: no package doc", rel)
		return stats{}
	}
	text := p.doc.Text()
	want := "Package " + p.name + " "
	if p.name == "main" {
		want = "Command " + filepath.Base(rel) + " "
	}
	if !strings.HasPrefix(text, want) {
		t.Errorf("%s: doc should open with %q", rel, want)
	}
	if p.lines > maxDocLines {
		t.Errorf("%s: package doc is %d lines, want at most %d; move the rest to docs/", rel, p.lines, maxDocLines)
	}
	var s stats
	var p0 comment.Parser
	blocks := p0.Parse(text).Content
	for i, b := range blocks {
		var next comment.Block
		if i+1 < len(blocks) {
			next = blocks[i+1]
		}
		for _, para := range paragraphs(b) {
			checkEnding(t, rel, para, next)
			s.addText(para)
		}
	}
	if w := s.wordsPerSentence(); w > maxWordsPerSentence {
		t.Errorf("%s: package doc sentences average %.1f words, want at most %d", rel, w, maxWordsPerSentence)
	}
	t.Logf("%-32s %3d lines %5.1f words/sentence %5.1f colons/1k words",
		rel, p.lines, s.wordsPerSentence(), s.colonsPerKWords())
	return s
}

// paragraphs returns the prose of a block, one string per paragraph.
// Headings and code are not prose.
func paragraphs(b comment.Block) []string {
	switch b := b.(type) {
	case *comment.Paragraph:
		return []string{plain(b.Text)}
	case *comment.List:
		var out []string
		for _, it := range b.Items {
			for _, c := range it.Content {
				out = append(out, paragraphs(c)...)
			}
		}
		return out
	}
	return nil
}

// checkEnding wants a paragraph to end at a full stop. A colon may end one
// that introduces code or a list, as in the standard library.
func checkEnding(t *testing.T, rel, para string, next comment.Block) {
	t.Helper()
	para = strings.TrimSpace(para)
	if para == "" {
		return
	}
	switch para[len(para)-1] {
	case '.', '?', '!':
		return
	case ':':
		switch next.(type) {
		case *comment.Code, *comment.List:
			return
		}
	}
	tail := para
	if len(tail) > 40 {
		tail = "…" + tail[len(tail)-40:]
	}
	t.Errorf("%s: paragraph should end at a full stop: %q", rel, tail)
}

// plain flattens inline text to a string.
func plain(ts []comment.Text) string {
	var b strings.Builder
	for _, x := range ts {
		switch x := x.(type) {
		case comment.Plain:
			b.WriteString(string(x))
		case comment.Italic:
			b.WriteString(string(x))
		case *comment.Link:
			b.WriteString(plain(x.Text))
		case *comment.DocLink:
			b.WriteString(plain(x.Text))
		}
	}
	return b.String()
}

// stats counts words, sentences and colons in prose.
type stats struct {
	words, sentences, colons int
}

func (s *stats) add(o stats) {
	s.words += o.words
	s.sentences += o.sentences
	s.colons += o.colons
}

// addText counts one paragraph. A sentence ends at a '.', '?' or '!' that
// ends a word, except in the abbreviations e.g. and i.e.
func (s *stats) addText(para string) {
	words := strings.Fields(para)
	if len(words) == 0 {
		return
	}
	s.words += len(words)
	ended := false
	for _, w := range words {
		w = strings.TrimRight(w, `")]'`+"`")
		if strings.HasSuffix(w, ":") {
			s.colons++
		}
		ended = false
		if w == "e.g." || w == "i.e." {
			continue
		}
		if strings.HasSuffix(w, ".") || strings.HasSuffix(w, "?") || strings.HasSuffix(w, "!") {
			s.sentences++
			ended = true
		}
	}
	if !ended {
		s.sentences++ // an unfinished last sentence still counts
	}
}

func (s stats) wordsPerSentence() float64 {
	if s.sentences == 0 {
		return 0
	}
	return float64(s.words) / float64(s.sentences)
}

func (s stats) colonsPerKWords() float64 {
	if s.words == 0 {
		return 0
	}
	return 1000 * float64(s.colons) / float64(s.words)
}

// moduleRoot finds the directory holding go.mod above the test's own.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test directory")
		}
		dir = parent
	}
}
