package main

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

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

// tokenPrincipals counts the distinct (tenant, principal) pairs a tokens
// file admits. Call it after host.LoadTokens accepted the file: it only
// reads the owner fields of lines that parser already checked.
func tokenPrincipals(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("reading the tokens file: %w", err)
	}
	owners := map[[2]string]struct{}{}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) != 3 || strings.HasPrefix(f[0], "#") {
			continue
		}
		owners[[2]string{f[1], f[2]}] = struct{}{}
	}
	return len(owners), nil
}
