package webhook

import (
	"go/ast"
	"go/parser"
	"go/token"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAdmissionWalk checks, on the source, the walk the README's architecture section describes
// for one admission: webhook -> state -> extender -> state -> webhook. NodeMutator.Handle calls
// into the shared state once (Ledger.AdmitNode) and into the extender never; Ledger.AdmitNode
// calls the extender once (AdmitNodeRequest) and the state functions it records with call it
// never. A call "into" a package is a call of a package-qualified function (state.X, extender.X),
// a method of the ledger or of the policies (m.Ledger.X, pols.X) or of a value the other package
// made (the answer, the admission state). Leaf packages (policy, Kubernetes) are not counted.
func TestAdmissionWalk(t *testing.T) {
	webhookFns := funcs(t, "node_mutator.go")
	stateFns := funcs(t, "../internal/state/ledger.go")

	// Handle: one call into state, none into the extender.
	calls := crossings(webhookFns["Handle"], map[string]string{"state": "state", "extender": "extender", "Ledger": "state", "Policies": "state", "ans": "extender"})
	assert.Equal(t, []string{"state: m.Ledger.AdmitNode"}, calls, "NodeMutator.Handle")
	assert.Empty(t, crossings(webhookFns["wouldDo"], map[string]string{"state": "state", "extender": "extender", "ans": "extender", "mp": "state"}), "wouldDo")
	assert.Empty(t, crossings(webhookFns["roleLabel"], map[string]string{"extender": "extender", "r": "extender"}), "roleLabel")

	// AdmitNode: one call into the extender; what it records with, none.
	into := map[string]string{"extender": "extender", "st": "extender", "ans": "extender", "d": "extender", "a": "extender"}
	assert.Equal(t, []string{"extender: extender.AdmitNodeRequest"}, crossings(stateFns["AdmitNode"], into), "Ledger.AdmitNode")
	for _, name := range []string{"lockState", "options", "record", "Assume", "ApplyChange", "mergeChanges"} {
		require.Contains(t, stateFns, name)
		assert.Empty(t, crossings(stateFns[name], into), "state's %s", name)
	}
}

func funcs(t *testing.T, path string) map[string]*ast.FuncDecl {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	require.NoError(t, err)
	out := map[string]*ast.FuncDecl{}
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok {
			out[fd.Name.Name] = fd
		}
	}
	return out
}

// crossings lists the calls in fn whose selector chain names one of pkgs' keys (a package, a
// field or a variable of the other package), as "package: call".
func crossings(fn *ast.FuncDecl, pkgs map[string]string) []string {
	if fn == nil {
		return []string{"missing function"}
	}
	var out []string
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		for x := ast.Expr(sel); ; {
			s, ok := x.(*ast.SelectorExpr)
			if !ok {
				if id, ok := x.(*ast.Ident); ok {
					if pkg, ok := pkgs[id.Name]; ok {
						out = append(out, pkg+": "+chain(sel))
					}
				}
				break
			}
			if pkg, ok := pkgs[s.Sel.Name]; ok && s != sel {
				out = append(out, pkg+": "+chain(sel))
				break
			}
			x = s.X
		}
		return true
	})
	return out
}

func chain(x ast.Expr) string {
	switch v := x.(type) {
	case *ast.SelectorExpr:
		return chain(v.X) + "." + v.Sel.Name
	case *ast.Ident:
		return v.Name
	}
	return "?"
}
