package main

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// A release build stamps these at link time (.ci/release does):
//
//	go build -ldflags "-X main.version=v0.1.0 -X main.buildTime=2026-12-02T07:00:00Z"
//
// Left empty, the version is the one the go command recorded and the build
// time is not known.
var (
	version   = ""
	buildTime = ""
)

// buildFacts is what `agentry version` reports. A fact the binary does not
// carry is empty (or nil), never guessed.
type buildFacts struct {
	Version    string `json:"version"`
	Module     string `json:"module,omitempty"`
	Commit     string `json:"commit,omitempty"`
	Dirty      *bool  `json:"dirty,omitempty"` // nil when no commit was recorded
	CommitTime string `json:"commit_time,omitempty"`
	BuildTime  string `json:"build_time,omitempty"`
	Go         string `json:"go"`
	Platform   string `json:"platform"`
}

// readBuildFacts combines the go command's build information (module
// version, vcs.revision, vcs.modified, vcs.time) with what the linker
// stamped. bi is nil when the binary carries no build information.
func readBuildFacts(bi *debug.BuildInfo, stampedVersion, stampedTime string) buildFacts {
	f := buildFacts{Version: "devel", BuildTime: stampedTime, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi != nil {
		f.Module = bi.Main.Path
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			f.Version = v
		}
		if bi.GoVersion != "" {
			f.Go = bi.GoVersion
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				f.Commit = s.Value
			case "vcs.time":
				f.CommitTime = s.Value
			case "vcs.modified":
				dirty := s.Value == "true"
				f.Dirty = &dirty
			}
		}
	}
	if f.Commit == "" {
		f.Dirty, f.CommitTime = nil, ""
	}
	if stampedVersion != "" {
		f.Version = stampedVersion
	}
	return f
}

func (f buildFacts) write(w io.Writer) {
	fmt.Fprintln(w, "agentry", f.Version)
	switch {
	case f.Commit == "":
		fmt.Fprintln(w, "  commit:    not recorded (built outside a git checkout, or with -buildvcs=false)")
	case f.Dirty != nil && *f.Dirty:
		fmt.Fprintln(w, "  commit:   ", f.Commit, "(dirty: built with uncommitted changes)")
	default:
		fmt.Fprintln(w, "  commit:   ", f.Commit)
	}
	if f.CommitTime != "" {
		fmt.Fprintln(w, "  committed:", f.CommitTime)
	}
	if f.BuildTime != "" {
		fmt.Fprintln(w, "  built:    ", f.BuildTime)
	} else {
		fmt.Fprintln(w, "  built:     not recorded (a release build stamps it)")
	}
	fmt.Fprintln(w, "  go:       ", f.Go, f.Platform)
}

func init() {
	commands = append(commands, func() *cobra.Command {
		var asJSON bool
		c := &cobra.Command{
			Use:   "version",
			Short: "Print agentry's version, the commit it was built from and when",
			Long: `Print the module version, the git commit the binary was built from (and
whether the tree had uncommitted changes), the commit's time, the build time
(stamped by a release build) and the Go toolchain.`,
			Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				bi, _ := debug.ReadBuildInfo()
				f := readBuildFacts(bi, version, buildTime)
				if !asJSON {
					f.write(cmd.OutOrStdout())
					return nil
				}
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(f)
			},
		}
		c.Flags().BoolVar(&asJSON, "json", false, "print the facts as one JSON object")
		return c
	})
}

// versionString is the version alone, for what agentry tells its peers (the
// MCP door's server info).
func versionString() string {
	bi, _ := debug.ReadBuildInfo()
	return readBuildFacts(bi, version, buildTime).Version
}
