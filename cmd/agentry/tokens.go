package main

import (
	"errors"
	"net/http"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/mcpserve"
	"github.com/agentry-dev/agentry/tool"
)

// mcpAuthenticator lets the MCP door prove callers with the same tokens
// file agentry serve reads (host.LoadTokens; docs/host.md): no
// Authorization header is no credentials, a listed token proves its tenant
// and principal, anything else is refused.
func mcpAuthenticator(t *host.Tokens) mcpserve.Authenticator {
	return func(r *http.Request) (*tool.Identity, error) {
		o, err := t.Authenticate(r)
		switch {
		case errors.Is(err, host.ErrNoCredentials):
			return nil, nil
		case err != nil:
			return nil, mcpserve.ErrBadCredentials
		}
		return &tool.Identity{Tenant: o.Tenant, Principal: o.Principal}, nil
	}
}
