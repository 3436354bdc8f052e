package main

import (
	"bytes"
	"encoding/json"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	out, err := execute(t, "version")
	if err != nil || !strings.HasPrefix(out, "agentry ") || !strings.Contains(out, "\n  go:") {
		t.Fatalf("version: %q, %v", out, err)
	}
	out, err = execute(t, "version", "--json")
	var f buildFacts
	if err != nil || json.Unmarshal([]byte(out), &f) != nil || f.Version == "" || f.Go == "" {
		t.Fatalf("version --json: %q, %v", out, err)
	}
}

func TestReadBuildFacts(t *testing.T) {
	yes, no := true, false
	vcs := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	main := debug.Module{Path: "github.com/agentry-dev/agentry", Version: "(devel)"}
	for _, tc := range []struct {
		name           string
		bi             *debug.BuildInfo
		stamped, built string
		want           buildFacts
	}{
		{name: "no build information", want: buildFacts{Version: "devel"}},
		{name: "a plain build outside git", bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: main},
			want: buildFacts{Version: "devel", Module: main.Path, Go: "go1.26.8"}},
		{name: "a git checkout with changes", bi: &debug.BuildInfo{GoVersion: "go1.26.8",
			Main:     debug.Module{Path: main.Path, Version: "v0.0.0-20261202074100-ce59b7176673+dirty"},
			Settings: vcs("vcs", "git", "vcs.revision", "ce59b7176673b918e1174278bfdd4cf026b8fc2a", "vcs.time", "2026-12-02T07:41:00Z", "vcs.modified", "true")},
			want: buildFacts{Version: "v0.0.0-20261202074100-ce59b7176673+dirty", Module: main.Path, Go: "go1.26.8",
				Commit: "ce59b7176673b918e1174278bfdd4cf026b8fc2a", CommitTime: "2026-12-02T07:41:00Z", Dirty: &yes}},
		{name: "a release build", bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: main,
			Settings: vcs("vcs.revision", "ce59b7176673b918e1174278bfdd4cf026b8fc2a", "vcs.modified", "false")},
			stamped: "v0.1.0", built: "2026-12-02T08:00:00Z",
			want: buildFacts{Version: "v0.1.0", Module: main.Path, Go: "go1.26.8", BuildTime: "2026-12-02T08:00:00Z",
				Commit: "ce59b7176673b918e1174278bfdd4cf026b8fc2a", Dirty: &no}},
		{name: "vcs.modified without a revision is not reported", bi: &debug.BuildInfo{Main: main, Settings: vcs("vcs.modified", "true", "vcs.time", "2026-12-02T07:41:00Z")},
			want: buildFacts{Version: "devel", Module: main.Path}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := readBuildFacts(tc.bi, tc.stamped, tc.built)
			if tc.want.Go == "" {
				tc.want.Go = runtime.Version()
			}
			tc.want.Platform = runtime.GOOS + "/" + runtime.GOARCH
			gj, _ := json.Marshal(got)
			wj, _ := json.Marshal(tc.want)
			if !bytes.Equal(gj, wj) {
				t.Fatalf("got  %s\nwant %s", gj, wj)
			}
			var text bytes.Buffer
			got.write(&text)
			if !strings.HasPrefix(text.String(), "agentry "+tc.want.Version+"\n") {
				t.Fatalf("text:\n%s", text.String())
			}
			if tc.want.Commit == "" && !strings.Contains(text.String(), "commit:    not recorded") ||
				tc.want.Dirty != nil && *tc.want.Dirty && !strings.Contains(text.String(), "(dirty: built with uncommitted changes)") {
				t.Fatalf("text does not state the commit as it is:\n%s", text.String())
			}
		})
	}
}
