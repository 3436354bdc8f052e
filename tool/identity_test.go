package tool_test

import (
	"testing"

	"github.com/agentry-dev/agentry/tool"
)

func TestIdentityClone(t *testing.T) {
	t.Parallel()
	var none *tool.Identity
	if none.Clone() != nil {
		t.Fatal("a nil identity cloned to a set one")
	}
	id := &tool.Identity{Tenant: "acme", Principal: "alice", ConversationID: "c1"}
	c := id.Clone()
	if c == id || *c != *id {
		t.Fatalf("clone %p %+v of %p %+v", c, c, id, id)
	}
	c.Principal = "mallory"
	if id.Principal != "alice" {
		t.Fatal("changing the clone changed the original")
	}
}

func TestIdentityEqual(t *testing.T) {
	t.Parallel()
	alice := &tool.Identity{Tenant: "acme", Principal: "alice"}
	for _, tc := range []struct {
		name string
		a, b *tool.Identity
		want bool
	}{
		{"both nil", nil, nil, true},
		{"nil and set", nil, alice, false},
		{"set and nil", alice, nil, false},
		{"nil and empty", nil, &tool.Identity{}, false},
		{"same pointer", alice, alice, true},
		{"equal fields", alice, &tool.Identity{Tenant: "acme", Principal: "alice"}, true},
		{"another principal", alice, &tool.Identity{Tenant: "acme", Principal: "bob"}, false},
		{"another tenant", alice, &tool.Identity{Tenant: "other", Principal: "alice"}, false},
		{"another conversation", alice, &tool.Identity{Tenant: "acme", Principal: "alice", ConversationID: "c"}, false},
	} {
		if got := tc.a.Equal(tc.b); got != tc.want {
			t.Errorf("%s: Equal = %v; want %v", tc.name, got, tc.want)
		}
	}
}
