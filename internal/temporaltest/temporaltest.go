// Package temporaltest gives tests the Temporal dev server that
// AGENTRY_TEST_TEMPORAL names (.ci/temporal starts one and prints it): one
// helper for every package whose tests need Temporal.
package temporaltest

import (
	"os"
	"testing"
)

// Addr returns the server's HOST:PORT. Without one the test is skipped,
// loudly — and under CI=true it fails instead.
func Addr(t testing.TB) string {
	t.Helper()
	addr := os.Getenv("AGENTRY_TEST_TEMPORAL")
	if addr == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("AGENTRY_TEST_TEMPORAL is unset under CI=true: run .ci/temporal (it starts `temporal server start-dev`) and export what it prints")
		}
		t.Skip("SKIPPING: this test needs Temporal and AGENTRY_TEST_TEMPORAL is unset (run .ci/temporal, or start `temporal server start-dev --headless` and set it to its HOST:PORT)")
	}
	return addr
}
