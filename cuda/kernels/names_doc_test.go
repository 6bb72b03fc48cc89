package kernels_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
)

// TestBuiltinNamesDocumentTheirArguments: the comment on each built-in
// kernel's name lists its parameters in launch order, as its spec
// declares them (name, element type, buffer or scalar): what go doc shows
// a user who launches it by name.
func TestBuiltinNamesDocumentTheirArguments(t *testing.T) {
	file, err := parser.ParseFile(token.NewFileSet(), "kernels.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	documented := 0
	for _, decl := range file.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.CONST {
			continue
		}
		for _, spec := range gen.Specs {
			vs := spec.(*ast.ValueSpec)
			lit, ok := vs.Values[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING || vs.Comment == nil {
				continue
			}
			name, _ := strconv.Unquote(lit.Value)
			k, ok := kernels.Builtin().Kernel(name)
			if !ok {
				continue
			}
			var want []string
			for _, p := range k.Params {
				kind := p.Elem.String()
				if p.Kind == cuda.ParamBuffer {
					kind += " buffer"
				}
				want = append(want, p.Name+" "+kind)
			}
			if got := vs.Comment.Text(); !strings.HasPrefix(got, "("+strings.Join(want, ", ")+"): ") {
				t.Errorf("%s's comment reads %q; want it to begin (%s): ", name, got, strings.Join(want, ", "))
			}
			documented++
		}
	}
	if documented != len(kernels.Builtin()) {
		t.Errorf("%d built-in kernels have their arguments on their name's comment; the registry has %d", documented, len(kernels.Builtin()))
	}
}
