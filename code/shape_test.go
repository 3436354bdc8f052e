package code_test

import (
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/agentry-dev/agentry/code"
)

func TestShapeHash(t *testing.T) {
	t.Parallel()
	same := []struct {
		lang, a, b string
	}{
		{"python", `total = sum(rows["amount"])`, `t = sum(data['price'])`},
		{"python", "x = 1\nprint(x)", "y = 42\nprint(y)  # the answer"},
		{"python", `print(f"{secret} is {value:.2f}")`, `print("redacted")`},
		{"python", "n = 0x1F + 3.5e-2", "m = 7 + 8"},
		{"python", `df.groupby("customer").amount.sum()`, `frame.groupby("region").price.sum()`},
		{"python", `s = """multi
line 'quoted' data"""`, `s = ''`},
		{"bash", `grep -c "ACME-4471" sales.csv`, `grep -c "x" other.csv`},
		{"bash", `wc -l $FILE | sort -n`, `wc -l $INPUT | sort -n`},
	}
	for _, tc := range same {
		if ha, hb := code.ShapeHash(tc.lang, tc.a), code.ShapeHash(tc.lang, tc.b); ha != hb {
			t.Errorf("%q and %q differ only in data and names, but hash %s and %s", tc.a, tc.b, ha, hb)
		}
	}
	different := []struct {
		lang, a, b string
	}{
		{"python", `sum(rows)`, `len(rows)`},
		{"python", `x = a + b`, `x = a * b`},
		{"python", "for r in rows:\n  print(r)", "while r:\n  print(r)"},
		{"python", `df.groupby("c").sum()`, `df.pivot("c").sum()`},
		{"bash", `grep x f`, `sed x f`},
	}
	for _, tc := range different {
		if code.ShapeHash(tc.lang, tc.a) == code.ShapeHash(tc.lang, tc.b) {
			t.Errorf("%q and %q call or do different things, but hash alike", tc.a, tc.b)
		}
	}
	if h := code.ShapeHash("python", "print(1)"); !regexp.MustCompile(`^[0-9a-f]{12}$`).MatchString(h) {
		t.Fatalf("shape hash %q is not 12 hex characters", h)
	}
}

// FuzzShapeHash: never panics, and the hash ignores what is inside a
// literal and what a variable is called.
func FuzzShapeHash(f *testing.F) {
	f.Add("total = sum(rows[%s])", "amount", "sales_total")
	f.Add("print(%s)\nx = 1", "'\\'\"", "value")
	f.Add("s = f%s", "{a}{b}", "é")
	f.Add("#%s\nrun(x)", "\x00\xff", "日本")
	f.Add(`""" %s`, "\n\n", "_x9")
	f.Fuzz(func(t *testing.T, template, literal, name string) {
		for _, lang := range []string{"python", "bash"} {
			code.ShapeHash(lang, template)
			code.ShapeHash(lang, literal)
		}
		if !strings.Contains(template, "%s") {
			return
		}
		// Literal content never matters once it is safely quoted.
		clean := strings.Map(func(r rune) rune {
			if r == '"' || r == '\\' || r == '\n' || r == '\r' || r == '\'' || r == '`' {
				return -1
			}
			return r
		}, literal)
		a := strings.Replace("v = 1\n"+`y = "`+"%s"+`"`, "%s", clean, 1)
		b := strings.Replace("v = 1\n"+`y = "`+"%s"+`"`, "%s", "", 1)
		if code.ShapeHash("python", a) != code.ShapeHash("python", b) {
			t.Fatalf("literal content changed the hash: %q vs %q", a, b)
		}
		// Neither does a variable's name, consistently renamed.
		id := identifier(name)
		if id == "" {
			return
		}
		p := "result = load()\nprint(result + 2)"
		q := strings.ReplaceAll(p, "result", id)
		if code.ShapeHash("python", p) != code.ShapeHash("python", q) {
			t.Fatalf("renaming result to %q changed the hash", id)
		}
	})
}

// identifier turns s into a Python identifier that is not a keyword and
// not a callee in the template, or "".
func identifier(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r == '_' || unicode.IsLetter(r) || (b.Len() > 0 && unicode.IsDigit(r)) {
			b.WriteRune(r)
		}
	}
	id := b.String()
	switch id {
	case "", "load", "print", "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class",
		"continue", "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
		"in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while", "with", "yield",
		"match", "case", "then", "fi", "do", "done", "esac", "function", "until", "select", "time", "local", "export",
		"r", "u", "b", "f", "br", "rb", "fr", "rf", "R", "U", "B", "F", "Br", "bR", "BR", "Rb", "rB", "RB", "Fr", "fR", "FR", "Rf", "rF", "RF":
		return ""
	}
	return id
}
