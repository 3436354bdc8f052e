package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAgentCredentialFlags(t *testing.T) {
	ac, hc, err := credFlags{keyFile: "k", agent: []string{"OPENAI_API_KEY=openai:api-key", "GH_TOKEN=gh"}}.parse()
	if err != nil {
		t.Fatal(err)
	}
	if len(ac) != 2 || ac[0].Var != "OPENAI_API_KEY" || ac[0].Name != "openai" || ac[0].AuthMethod != "api-key" || ac[1].AuthMethod != "" {
		t.Fatalf("adapter credentials %+v", ac)
	}
	if len(hc) != 2 || hc[1].Name != "gh" || hc[1].Var != "GH_TOKEN" {
		t.Fatalf("host credentials %+v", hc)
	}
	for name, c := range map[string]credFlags{
		"no key file": {agent: []string{"A=a"}},
		"no =":        {keyFile: "k", agent: []string{"openai"}},
		"bad name":    {keyFile: "k", agent: []string{"A=Open AI"}},
		"bad var":     {keyFile: "k", agent: []string{"1A=a"}},
		"twice":       {keyFile: "k", agent: []string{"A=a", "A=b"}},
	} {
		if _, _, err := c.parse(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestCredentialsKeyFile(t *testing.T) {
	dir := t.TempDir()
	good := "k1 " + strings.Repeat("A", 43) + "=\n"
	p := filepath.Join(dir, "key")
	if err := os.WriteFile(p, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := credFlags{keyFile: p}.keyring()
	if err != nil || k.Current() != "k1" {
		t.Fatalf("keyring %v, %v", k, err)
	}
	if err := os.Chmod(p, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := (credFlags{keyFile: p}).keyring(); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("a key file others may read: %v", err)
	}
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("k1 c2VjcmV0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := (credFlags{keyFile: bad}).keyring(); err == nil || strings.Contains(err.Error(), "c2VjcmV0") {
		t.Fatalf("a short key: %v", err)
	}
	if _, err := (credFlags{keyFile: filepath.Join(dir, "none")}).keyring(); err == nil {
		t.Fatal("a missing key file was taken")
	}
}

func TestConfigCheckKnowsCredentialKeys(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "credentials.key")
	if err := os.WriteFile(key, []byte("k1 "+strings.Repeat("A", 43)+"=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var out strings.Builder
	good := write("good.toml", "agent = \"acp\"\nagent-cmd = \"true\"\ncredentials-key-file = \""+key+"\"\nagent-credential = [\"OPENAI_API_KEY=openai:api-key\"]\n")
	if err := checkConfigFile(good, &out); err != nil {
		t.Fatalf("a good file: %v", err)
	}
	for name, text := range map[string]string{
		"native agent": "credentials-key-file = \"" + key + "\"\nagent-credential = [\"OPENAI_API_KEY=openai\"]\n",
		"no key file":  "agent = \"acp\"\nagent-cmd = \"true\"\nagent-credential = [\"OPENAI_API_KEY=openai\"]\n",
		"missing key":  "credentials-key-file = \"" + filepath.Join(dir, "none") + "\"\n",
	} {
		if err := checkConfigFile(write("bad.toml", text), &out); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
