package client_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The committed client.gen.go is what the pinned generator makes from
// docs/openapi.yaml: the document changed, the client must be generated
// again (go generate ./client). The generator is built offline, from the
// module cache; without it the test skips, and under CI=true it fails.
func TestGeneratedClientIsCurrent(t *testing.T) {
	src, err := os.ReadFile("generate.go")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^//go:generate go run (\S+@v[0-9.]+) -config (\S+) -o client\.gen\.go (\S+)$`).FindSubmatch(src)
	if m == nil {
		t.Fatal("generate.go has no go:generate line of the form: go run PKG@VERSION -config FILE -o client.gen.go DOC")
	}
	gen, cfg, doc := string(m[1]), string(m[2]), string(m[3])
	gobin, err := exec.LookPath("go")
	if err != nil {
		unavailable(t, "no go command")
	}
	bin := t.TempDir()
	install := exec.Command(gobin, "install", gen)
	// Offline: the module cache is the only proxy.
	cache, err := exec.Command(gobin, "env", "GOMODCACHE").Output()
	if err != nil {
		unavailable(t, "go env GOMODCACHE: "+err.Error())
	}
	proxy := "file://" + filepath.Join(string(bytes.TrimSpace(cache)), "cache", "download")
	install.Env = append(os.Environ(), "GOBIN="+bin, "GOPROXY="+proxy, "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := install.CombinedOutput(); err != nil {
		unavailable(t, "the generator "+gen+" cannot be built offline: "+err.Error()+"\n"+string(out)+
			"(fetch it once with: go run "+gen+" -version)")
	}
	fresh := filepath.Join(t.TempDir(), "client.gen.go")
	run := exec.Command(filepath.Join(bin, "oapi-codegen"), "-config", cfg, "-o", fresh, doc)
	if out, err := run.CombinedOutput(); err != nil {
		t.Fatalf("oapi-codegen failed on %s: %v\n%s", doc, err, out)
	}
	want, err := os.ReadFile(fresh)
	if err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile("client.gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, want) {
		t.Fatalf("client.gen.go is not what %s generates from %s: run go generate ./client and commit the result", gen, doc)
	}
}

func unavailable(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(why)
	}
	t.Skip("SKIPPING: " + why)
}
