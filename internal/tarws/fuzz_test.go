package tarws_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/agentry-dev/agentry/internal/tarws"
)

// FuzzExtract: whatever the archive, nothing outside the workspace
// changes, and a refusal is a *RefusalError or a plain error, never a
// panic. The seed corpus (testdata/fuzz/FuzzExtract) holds the refused
// shapes and a good archive.
func FuzzExtract(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		l := newLayout(t)
		_, _ = tarws.Extract(context.Background(), bytes.NewReader(data), l.root, tarws.Limits{MaxBytes: 1 << 20, MaxEntries: 64})
		l.untouched(t)
	})
}
