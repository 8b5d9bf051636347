package agent

import (
	"fmt"
	"strings"
	"text/template"
	"text/template/parse"
)

// Registrants choose the values a template prints (a version, a tag,
// metadata), and a value such as "1; } server { … }" would add blocks to
// an nginx file. So every action that prints goes through checkValue,
// added to its pipeline after parsing, as html/template adds its
// escapers. checkValue lets through only the characters of addresses,
// numbers and names, which split no token and end no block in a
// line-based configuration (nginx, HAProxy). A quoted value, from the
// quote function, is already safe. Anything else refuses the render.

// checkName is the function appended to every printing action.
const checkName = "checkValue"

// quoted is a value quote made safe inside double quotes.
type quoted string

// safeFuncs are the functions templates get for values' syntax.
var safeFuncs = template.FuncMap{
	checkName: checkValue,
	"quote":   quoteValue,
}

// checkValue returns v's text if every character of it is in the safe
// set, and an error naming the first that is not otherwise.
func checkValue(v any) (string, error) {
	if q, ok := v.(quoted); ok {
		return string(q), nil
	}
	s := fmt.Sprint(v)
	for i := 0; i < len(s); i++ {
		if !safeChar(s[i]) {
			r := []rune(s[i:])[0]
			return "", fmt.Errorf("%q: character %q at byte %d could change the file's structure "+
				"(a printed value may hold only letters, digits and . : - _ / + = , @ %% [ ]; "+
				"print strings with quote where the syntax has them)", s, r, i)
		}
	}
	return s, nil
}

func safeChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte(".:-_/+=,@%[]", c) >= 0
}

// quoteValue, the templates' quote, returns v as one double-quoted
// string of nginx and JSON syntax. Backslash and double quote are
// escaped; tab, newline and carriage return are written \t, \n and \r.
// It refuses other control characters, which neither syntax reads back
// the same.
func quoteValue(v any) (quoted, error) {
	s := fmt.Sprint(v)
	var b strings.Builder
	b.WriteByte('"')
	for i, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 || r == 0x2028 || r == 0x2029:
			return "", fmt.Errorf("%q: control character %q at byte %d cannot be quoted", s, r, i)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return quoted(b.String()), nil
}

// guard adds checkValue to the end of every printing action of t and
// the templates it defines.
func guard(t *template.Template) {
	for _, tt := range t.Templates() {
		if tt.Tree != nil {
			guardNode(tt.Tree.Root)
		}
	}
}

// constant reports whether a pipeline is one literal, such as {{"\n"}}.
// The template's author wrote it, not a registrant.
func constant(p *parse.PipeNode) bool {
	if len(p.Cmds) != 1 || len(p.Cmds[0].Args) != 1 {
		return false
	}
	switch p.Cmds[0].Args[0].(type) {
	case *parse.StringNode, *parse.NumberNode, *parse.BoolNode:
		return true
	}
	return false
}

func guardNode(n parse.Node) {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return
		}
		for _, c := range n.Nodes {
			guardNode(c)
		}
	case *parse.ActionNode:
		if len(n.Pipe.Decl) > 0 || constant(n.Pipe) { // {{$x := …}} prints nothing
			return
		}
		id := parse.NewIdentifier(checkName).SetPos(n.Pos)
		n.Pipe.Cmds = append(n.Pipe.Cmds, &parse.CommandNode{NodeType: parse.NodeCommand, Pos: n.Pos, Args: []parse.Node{id}})
	case *parse.IfNode:
		guardNode(n.List)
		guardNode(n.ElseList)
	case *parse.RangeNode:
		guardNode(n.List)
		guardNode(n.ElseList)
	case *parse.WithNode:
		guardNode(n.List)
		guardNode(n.ElseList)
	}
}
