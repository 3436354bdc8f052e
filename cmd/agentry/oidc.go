package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/agentry-dev/agentry/host"
)

// oidcFlags are the --oidc-* flags of agentry serve and agentry mcp: bearer
// JWTs from an OpenID provider, beside (or instead of) a tokens file.
type oidcFlags struct {
	issuer, audience, clientID          string
	tenant, tenantClaim, principalClaim string
	rolesClaim, adminRole               string
	scopes                              []string

	now func() time.Time // for tests: the clock tokens are judged by
}

// add adds the flags; console adds serve's: how the console signs people
// in.
func (o *oidcFlags) add(f *pflag.FlagSet, console bool) {
	f.StringVar(&o.issuer, "oidc-issuer", "", "accept bearer JWTs from this OpenID provider (its issuer URL, exactly as its discovery document names it; https, or http on loopback); see docs/host.md#identity")
	f.StringVar(&o.audience, "oidc-audience", "", "with --oidc-issuer: the value a token's aud must hold (this service's identifier at the provider)")
	f.StringVar(&o.tenantClaim, "oidc-tenant-claim", "", "with --oidc-issuer: the claim holding each caller's tenant (dots reach into nested claims: org.id)")
	f.StringVar(&o.tenant, "oidc-tenant", "", "with --oidc-issuer and no --oidc-tenant-claim: the one tenant every caller is in (default \"default\")")
	f.StringVar(&o.principalClaim, "oidc-principal-claim", "sub", "with --oidc-issuer: the claim holding each caller's principal")
	f.StringVar(&o.rolesClaim, "oidc-roles-claim", "", "with --oidc-issuer: the claim (a string or a list) that makes a caller an admin of their tenant when it holds --oidc-admin-role (for example groups)")
	f.StringVar(&o.adminRole, "oidc-admin-role", host.DefaultOIDCAdminRole, "with --oidc-roles-claim: the value that makes an admin")
	if console {
		f.StringVar(&o.clientID, "oidc-client-id", "", "with --oidc-issuer: the console's client at the provider (public, no secret: authorization code with PKCE); without it the console takes pasted tokens")
		f.StringSliceVar(&o.scopes, "oidc-scopes", []string{"openid"}, "with --oidc-client-id: the scopes the console asks for")
	}
}

// set reports whether an issuer was given.
func (o *oidcFlags) set() bool { return o.issuer != "" }

// check refuses --oidc-* flags that mean nothing without --oidc-issuer.
func (o *oidcFlags) check(f *pflag.FlagSet) error {
	if o.set() {
		return nil
	}
	var given []string
	f.Visit(func(fl *pflag.Flag) {
		if strings.HasPrefix(fl.Name, "oidc-") {
			given = append(given, "--"+fl.Name)
		}
	})
	if len(given) > 0 {
		return usageError("%s need --oidc-issuer: they say how to read the provider's tokens", strings.Join(given, ", "))
	}
	return nil
}

// open discovers the provider: nil without --oidc-issuer.
func (o *oidcFlags) open(ctx context.Context, stderr io.Writer, command string) (*host.OIDC, error) {
	if !o.set() {
		return nil, nil
	}
	tenant := o.tenant
	if tenant == "" && o.tenantClaim == "" {
		tenant = "default"
	}
	a, err := host.NewOIDC(ctx, host.OIDCConfig{
		Issuer: o.issuer, Audience: o.audience, ClientID: o.clientID, Scopes: o.scopes,
		Tenant: tenant, TenantClaim: o.tenantClaim, PrincipalClaim: o.principalClaim,
		RolesClaim: o.rolesClaim, AdminRole: o.adminRole, Now: o.now,
		Logger: slog.New(slog.NewTextHandler(stderr, nil)).With("command", command),
	})
	if err != nil {
		return nil, usageError("%v", err)
	}
	return a, nil
}

// describe says whom the provider admits, for the log.
func (o *oidcFlags) describe() string {
	who := "tenant from claim " + o.tenantClaim
	if o.tenantClaim == "" {
		who = "tenant " + o.tenant
		if o.tenant == "" {
			who = "tenant default"
		}
	}
	return fmt.Sprintf("bearer JWTs from %s for audience %s (principal from claim %s, %s)", o.issuer, o.audience, o.principalClaim, who)
}
