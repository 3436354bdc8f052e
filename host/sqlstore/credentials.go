package sqlstore

import (
	"context"
	"database/sql"
	"encoding/base64"
	"errors"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/tool"
)

// v9 keeps people's credentials, sealed by the host (host.Keyring): the
// key's id and the nonce and ciphertext in base64. No column holds a
// secret in clear.
var v9 = []string{
	`CREATE TABLE IF NOT EXISTS agentry_credentials (
		tenant     TEXT NOT NULL,
		principal  TEXT NOT NULL,
		name       TEXT NOT NULL,
		key_id     TEXT NOT NULL,
		sealed     TEXT NOT NULL,
		created_us BIGINT NOT NULL,
		updated_us BIGINT NOT NULL,
		PRIMARY KEY (tenant, principal, name)
	)`,
}

var _ host.CredentialStore = (*Store)(nil)

// PutCredential stores c for owner, replacing one of the same name (its
// creation time kept).
func (s *Store) PutCredential(ctx context.Context, owner tool.Identity, c host.SealedCredential) (bool, error) {
	sealed := base64.StdEncoding.EncodeToString(c.Sealed)
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return false, s.fail("storing a credential", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	res, err := tx.ExecContext(ctx, s.rebind(`UPDATE agentry_credentials SET key_id = ?, sealed = ?, updated_us = ? WHERE tenant = ? AND principal = ? AND name = ?`),
		c.KeyID, sealed, micros(c.UpdatedAt), owner.Tenant, owner.Principal, c.Name)
	if err != nil {
		return false, s.fail("storing a credential", err)
	}
	created := false
	if n, _ := res.RowsAffected(); n == 0 {
		created = true
		_, err = tx.ExecContext(ctx, s.rebind(`INSERT INTO agentry_credentials (tenant, principal, name, key_id, sealed, created_us, updated_us) VALUES (?, ?, ?, ?, ?, ?, ?)`),
			owner.Tenant, owner.Principal, c.Name, c.KeyID, sealed, micros(c.CreatedAt), micros(c.UpdatedAt))
		if err != nil {
			if s.d.UniqueViolation(err) {
				return false, host.ErrConflict
			}
			return false, s.fail("storing a credential", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return false, s.fail("storing a credential", err)
	}
	return created, nil
}

// GetCredential returns owner's credential name, sealed.
func (s *Store) GetCredential(ctx context.Context, owner tool.Identity, name string) (host.SealedCredential, error) {
	c := host.SealedCredential{Name: name}
	var sealed string
	var created, updated int64
	err := s.read.QueryRowContext(ctx, s.rebind(`SELECT key_id, sealed, created_us, updated_us FROM agentry_credentials WHERE tenant = ? AND principal = ? AND name = ?`),
		owner.Tenant, owner.Principal, name).Scan(&c.KeyID, &sealed, &created, &updated)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return host.SealedCredential{}, host.ErrNoCredential
	case err != nil:
		return host.SealedCredential{}, s.fail("reading a credential", err)
	}
	if c.Sealed, err = base64.StdEncoding.DecodeString(sealed); err != nil {
		return host.SealedCredential{}, s.fail("reading a credential", err)
	}
	c.CreatedAt, c.UpdatedAt = fromMicros(created), fromMicros(updated)
	return c, nil
}

// ListCredentials returns owner's credentials by name, without their
// sealed bytes.
func (s *Store) ListCredentials(ctx context.Context, owner tool.Identity) ([]host.SealedCredential, error) {
	rows, err := s.read.QueryContext(ctx, s.rebind(`SELECT name, key_id, created_us, updated_us FROM agentry_credentials WHERE tenant = ? AND principal = ? ORDER BY name`),
		owner.Tenant, owner.Principal)
	if err != nil {
		return nil, s.fail("listing credentials", err)
	}
	defer rows.Close()
	out := []host.SealedCredential{}
	for rows.Next() {
		var c host.SealedCredential
		var created, updated int64
		if err := rows.Scan(&c.Name, &c.KeyID, &created, &updated); err != nil {
			return nil, s.fail("listing credentials", err)
		}
		c.CreatedAt, c.UpdatedAt = fromMicros(created), fromMicros(updated)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fail("listing credentials", err)
	}
	return out, nil
}

// DeleteCredential removes owner's credential name.
func (s *Store) DeleteCredential(ctx context.Context, owner tool.Identity, name string) error {
	res, err := s.write.ExecContext(ctx, s.rebind(`DELETE FROM agentry_credentials WHERE tenant = ? AND principal = ? AND name = ?`),
		owner.Tenant, owner.Principal, name)
	if err != nil {
		return s.fail("deleting a credential", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return host.ErrNoCredential
	}
	return nil
}
