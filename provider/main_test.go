package provider_test

import (
	"flag"
	"fmt"
	"os"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentry-dev/agentry/provider"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(everyCode{m}) }

// seenCodes records every code a test observed through the public API.
var seenCodes sync.Map

func sawCode(c provider.Code) { seenCodes.Store(c, true) }

// everyCode fails a full, passing run in which some code was never
// produced by a test: every code the contract names has a test.
type everyCode struct{ m *testing.M }

func (e everyCode) Run() int {
	code := e.m.Run()
	if code != 0 || filtered() {
		return code
	}
	var missing []provider.Code
	for _, c := range provider.Codes() {
		if _, ok := seenCodes.Load(c); !ok {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		fmt.Fprintf(os.Stderr, "no test produced these codes: %v\n", missing)
		return 1
	}
	return 0
}

// filtered is true when only some tests ran.
func filtered() bool {
	for _, name := range []string{"test.run", "test.skip", "test.fuzz"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" {
			return true
		}
	}
	return false
}
