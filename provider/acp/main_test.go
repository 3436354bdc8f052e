package acp_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(scriptedEnv) == "1" {
		runScriptedAgent()
		return
	}
	goleak.VerifyTestMain(m)
}
