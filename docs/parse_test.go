package docs

import (
	"strings"
	"testing"
)

func TestParseExamples(t *testing.T) {
	page := strings.Join([]string{
		"# A page",
		"```sh offline",
		"agentry run 'print(6*7)'",
		"```",
		"```sh",
		"agentry serve   # not marked",
		"```",
		"````md",
		"```sh offline",
		"inside another fence: not a block of this page",
		"```",
		"````",
		"  ```sh offline checkout",
		"  go install ./cmd/agentry",
		"  ```",
		"```go",
		"fmt.Println(1)",
		"```",
		"  ```` ``` ```` is inline code, not a fence",
	}, "\n")
	got, err := parseExamples("p.md", []byte(page))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d examples, want 2: %+v", len(got), got)
	}
	if got[0] != (example{file: "p.md", line: 2, script: "agentry run 'print(6*7)'\n"}) {
		t.Errorf("first: %+v", got[0])
	}
	if got[1] != (example{file: "p.md", line: 13, checkout: true, script: "  go install ./cmd/agentry\n"}) {
		t.Errorf("second: %+v", got[1])
	}

	for _, bad := range []struct{ page, want string }{
		{"```sh ofline\nx\n```\n", `p.md:1: "ofline" is not a marker`},
		{"```sh checkout\nx\n```\n", "without offline marks nothing"},
		{"text\n```sh offline\nx\n", "never closed"},
	} {
		if _, err := parseExamples("p.md", []byte(bad.page)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: error %v, want one saying %q", bad.page, err, bad.want)
		}
	}
}

// Whatever the page, the parser returns blocks that sit inside it, each
// starting on the line after its fence, or an error; it never panics.
func FuzzParseExamples(f *testing.F) {
	f.Add([]byte("```sh offline\nagentry demo\n```\n"))
	f.Add([]byte("````\n```sh offline\n```\n````\n"))
	f.Add([]byte("```sh offline checkout\ngo install ./cmd/agentry\n```"))
	f.Fuzz(func(t *testing.T, page []byte) {
		exs, err := parseExamples("f.md", page)
		if err != nil {
			return
		}
		lines := strings.Split(string(page), "\n")
		for _, ex := range exs {
			if ex.line < 1 || ex.line > len(lines) || !strings.Contains(lines[ex.line-1], "```") {
				t.Fatalf("block at line %d is not at a fence: %q", ex.line, lines)
			}
			for _, l := range strings.Split(strings.TrimSuffix(ex.script, "\n"), "\n") {
				if !strings.Contains(string(page), l) {
					t.Fatalf("line %q of block %q is not in the page", l, ex.script)
				}
			}
		}
	})
}
