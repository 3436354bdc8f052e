package host_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/tool"
)

// expecting is an adapter that prepares sessions ahead and records the
// tools the host said it lends every session.
type expecting struct {
	told [][]provider.HostToolSpec
}

func (e *expecting) Create(context.Context, provider.CreateRequest) (provider.Session, error) {
	return nil, errors.New("this test opens no session")
}

func (e *expecting) ExpectHostTools(tools []provider.HostToolSpec) { e.told = append(e.told, tools) }

// A host tells the provider of each agent the definitions of the tools it
// lends that agent's every session, once, as it is built.
func TestNewTellsTheProviderTheToolsItLends(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "x.db"))
	defer st.Close()
	auth, _ := tokensFor(t, nil)
	e := &expecting{}
	v, err := provider.Validate(provider.Capabilities{ProviderKey: "ahead", HostBinding: provider.HostBindingSupport{Supported: true}}, e)
	if err != nil {
		t.Fatal(err)
	}
	echo := tool.Func("echo", "says what it is told", func(_ context.Context, _ *tool.Call, in struct {
		Text string `json:"text"`
	}) (string, error) {
		return in.Text, nil
	})
	h, err := host.New(host.Options{Adapter: v, Store: st, Auth: auth, EventSink: host.NewEventSink(), EvictEvery: -1, RetentionEvery: -1,
		HostTools: []tool.Tool{echo}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Shutdown(context.Background())
	if len(e.told) != 1 || len(e.told[0]) != 1 || e.told[0][0].Name != "echo" || e.told[0][0].Description != "says what it is told" ||
		!strings.Contains(string(e.told[0][0].InputSchema), `"text"`) {
		t.Fatalf("the provider was told %+v; want the echo tool's definition, once", e.told)
	}
}
