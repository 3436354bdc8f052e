package provider_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/agentry-dev/agentry/provider"
)

// expecter is an adapter with the HostToolsExpecter port, recording what
// it was told.
type expecter struct {
	createFn
	told [][]provider.HostToolSpec
}

func (e *expecter) ExpectHostTools(tools []provider.HostToolSpec) { e.told = append(e.told, tools) }

// The host's word on the tools it lends every session reaches an adapter
// with the port checked and as a binding's facade shows them (schema
// defaulted); a malformed definition is refused as in a binding and not
// passed on; a provider without host bindings, or without the port, is
// not told.
func TestExpectHostTools(t *testing.T) {
	t.Parallel()
	p := newTprov()
	p.caps.Sessions = provider.SessionCapabilities{} // the expecter has Create only
	e := &expecter{createFn: p.Create}
	v, err := provider.Validate(p.caps, e)
	if err != nil {
		t.Fatal(err)
	}
	lent := []provider.HostToolSpec{{Name: "echo", Description: "echoes", InputSchema: json.RawMessage(echoSchema)}, {Name: "any"}}
	if err := v.ExpectHostTools(lent); err != nil {
		t.Fatal(err)
	}
	var tools []provider.HostTool
	for _, s := range lent {
		tools = append(tools, provider.HostTool{Name: s.Name, Description: s.Description, InputSchema: s.InputSchema, Invoke: newHostSide().b.Tools[0].Invoke})
	}
	s, err := openBound(t, v, "s1", newHostSide(tools...).b)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(t.Context(), provider.CloseRequested)
	if want := p.lastHostTools().Tools(); len(e.told) != 1 || !reflect.DeepEqual(e.told[0], want) {
		t.Fatalf("the adapter was told %s; a binding of the same tools shows %s", js(e.told), js(want))
	}

	wantCode(t, v.ExpectHostTools([]provider.HostToolSpec{{Name: "no spaces"}}), provider.CodeInvalidHostBinding)
	wantCode(t, v.ExpectHostTools([]provider.HostToolSpec{{Name: "a"}, {Name: "a"}}), provider.CodeHostToolNameConflict)
	wantCode(t, v.ExpectHostTools([]provider.HostToolSpec{{Name: "a", InputSchema: json.RawMessage(`{"type":"string"}`)}}), provider.CodeInvalidHostBinding)
	if len(e.told) != 1 {
		t.Fatalf("refused definitions reached the adapter: %s", js(e.told))
	}

	noBinding := p.caps
	noBinding.HostBinding = provider.HostBindingSupport{}
	e2 := &expecter{createFn: p.Create}
	v2, err := provider.Validate(noBinding, e2)
	if err != nil {
		t.Fatal(err)
	}
	if err := v2.ExpectHostTools(lent); err != nil || len(e2.told) != 0 {
		t.Fatalf("a provider without host bindings: %v, told %s", err, js(e2.told))
	}
	if err := p.validated(t).ExpectHostTools(lent); err != nil {
		t.Fatalf("an adapter without the port: %v", err)
	}
}

func js(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
