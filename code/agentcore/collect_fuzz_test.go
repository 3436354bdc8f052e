package agentcore

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/bedrockagentcore/types"
)

// events builds one or two result events from fuzz input. flags:
// 1 structured content, 2 exit code, 4 isError, 8 a second event,
// 16 an image block, 32 a text block.
func events(stdout, stderr, text string, exit int32, flags uint8) []types.CodeInterpreterResult {
	one := func(out, errOut string) types.CodeInterpreterResult {
		var r types.CodeInterpreterResult
		if flags&1 != 0 {
			sc := &types.ToolResultStructuredContent{Stdout: aws.String(out), Stderr: aws.String(errOut)}
			if flags&2 != 0 {
				sc.ExitCode = aws.Int32(exit)
			}
			r.StructuredContent = sc
		}
		if flags&4 != 0 {
			r.IsError = aws.Bool(true)
		}
		if flags&32 != 0 {
			r.Content = append(r.Content, types.ContentBlock{Type: types.ContentBlockTypeText, Text: aws.String(text)})
		}
		if flags&16 != 0 {
			r.Content = append(r.Content, types.ContentBlock{Type: types.ContentBlockTypeImage, Data: []byte(text)})
		}
		return r
	}
	evs := []types.CodeInterpreterResult{one(stdout, stderr)}
	if flags&8 != 0 {
		evs = append(evs, one(stderr, stdout))
	}
	return evs
}

func collect(evs []types.CodeInterpreterResult, limit int) *collector {
	c := newCollector(limit)
	for i := range evs {
		c.add(&evs[i])
	}
	return c
}

// FuzzCollect checks the decoding of result events against itself with
// no limit: a cut result is the character prefix of the whole one, the cut
// is stated exactly when it happened with the right length, and OK,
// ExitCode and Artifacts follow the events.
func FuzzCollect(f *testing.F) {
	f.Add("42\n", "", "42\n", int32(0), uint8(1|2|32), uint16(8000))
	f.Add("", "Traceback\nValueError\n", "Traceback", int32(1), uint8(1|2|4|32), uint16(5))
	f.Add("héllo wörld", "", "", int32(0), uint8(1|8), uint16(3))
	f.Add("", "", "NameError: x", int32(0), uint8(4|32), uint16(100))
	f.Add("a", "b", "\xff\xfe broken utf8", int32(-9), uint8(255), uint16(0))
	f.Fuzz(func(t *testing.T, stdout, stderr, text string, exit int32, flags uint8, limit uint16) {
		evs := events(stdout, stderr, text, exit, flags)
		whole := collect(evs, math.MaxInt).result()
		cut := collect(evs, int(limit)).result()

		for _, s := range []struct {
			name       string
			whole, cut string
			stated     bool
		}{
			{"stdout", whole.Stdout, cut.Stdout, cut.Truncated != nil && cut.Truncated.Stdout},
			{"stderr", whole.Stderr, cut.Stderr, cut.Truncated != nil && cut.Truncated.Stderr},
		} {
			n := utf8.RuneCountInString(s.whole)
			want, _ := prefixRunes(s.whole, int(limit))
			if s.cut != want {
				t.Fatalf("%s: cut %q is not the %d-character prefix of %q", s.name, s.cut, limit, s.whole)
			}
			if s.stated != (n > int(limit)) {
				t.Fatalf("%s: %d characters, limit %d, cut stated %v", s.name, n, limit, s.stated)
			}
			if s.stated && cut.Truncated.OfChars < n {
				t.Fatalf("%s: OfChars %d < %d", s.name, cut.Truncated.OfChars, n)
			}
		}
		if tr := cut.Truncated; tr != nil {
			if !tr.Stdout && !tr.Stderr {
				t.Fatal("a Truncation that names no stream")
			}
			if tr.OfChars != max(utf8.RuneCountInString(whole.Stdout)*b2i(tr.Stdout), utf8.RuneCountInString(whole.Stderr)*b2i(tr.Stderr)) {
				t.Fatalf("OfChars %d is not the longest cut stream", tr.OfChars)
			}
		}
		if !utf8.ValidString(cut.Stdout) || !utf8.ValidString(cut.Stderr) {
			t.Fatalf("invalid UTF-8 in the result: %q / %q", cut.Stdout, cut.Stderr)
		}
		if whole.Truncated != nil {
			t.Fatal("uncut output reported a cut")
		}

		isErr := flags&4 != 0
		hasExit := flags&1 != 0 && flags&2 != 0
		if hasExit != (cut.ExitCode != nil) || hasExit && *cut.ExitCode != int(exit) {
			t.Fatalf("exit code %v, sent %v/%d", cut.ExitCode, hasExit, exit)
		}
		if wantOK := !isErr && (!hasExit || exit == 0); cut.OK != wantOK {
			t.Fatalf("OK %v, want %v", cut.OK, wantOK)
		}
		if hasImage := flags&16 != 0; hasImage != (cut.Artifacts != nil) {
			t.Fatalf("artifacts %v with image block %v", cut.Artifacts, hasImage)
		}
		// Structured content wins: the output is exactly its fields, and
		// text blocks never add to it. Without it, a text block is the
		// output of its stream.
		// Each piece is repaired to valid UTF-8 on its own.
		v := func(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }
		var wantOut, wantErr string
		switch {
		case flags&1 != 0:
			wantOut, wantErr = v(stdout), v(stderr)
			if flags&8 != 0 {
				wantOut, wantErr = v(stdout)+v(stderr), v(stderr)+v(stdout)
			}
		case flags&32 != 0 && flags&8 == 0:
			if isErr {
				wantErr = v(text)
			} else {
				wantOut = v(text)
			}
		default:
			return
		}
		if whole.Stdout != wantOut || whole.Stderr != wantErr {
			t.Fatalf("decoded %q / %q, want %q / %q", whole.Stdout, whole.Stderr, wantOut, wantErr)
		}
	})
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// FuzzValidateSessionTimeout: zero, or whole seconds in 60..28800.
func FuzzValidateSessionTimeout(f *testing.F) {
	for _, d := range []time.Duration{0, 59 * time.Second, 60 * time.Second, 28800 * time.Second, 28801 * time.Second, 90*time.Second + 1, -1, math.MinInt64, math.MaxInt64} {
		f.Add(int64(d))
	}
	f.Fuzz(func(t *testing.T, n int64) {
		d := time.Duration(n)
		err := ValidateSessionTimeout(d)
		ok := d == 0 || d >= 60*time.Second && d <= 28800*time.Second && d%time.Second == 0
		if (err == nil) != ok {
			t.Fatalf("%v: error %v, want ok=%v", d, err, ok)
		}
		if err != nil && !errors.Is(err, ErrSessionTimeout) {
			t.Fatalf("%v: %v does not match ErrSessionTimeout", d, err)
		}
	})
}

// FuzzLanguage: what is accepted maps to one of the service's languages;
// what is refused is named briefly and matches ErrUnsupportedLanguage.
func FuzzLanguage(f *testing.F) {
	for _, s := range []string{"python", "PY", " ts ", "javascript", "ruby", "", "pythonx", strings.Repeat("long", 100), "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		lang, err := Language(name)
		if err != nil {
			if !errors.Is(err, ErrUnsupportedLanguage) || lang != "" || len(err.Error()) > 256 {
				t.Fatalf("%q: %v", name, err)
			}
			return
		}
		switch lang {
		case types.ProgrammingLanguagePython, types.ProgrammingLanguageJavascript, types.ProgrammingLanguageTypescript:
		default:
			t.Fatalf("%q mapped to %q", name, lang)
		}
		if again, err := Language(string(lang)); err != nil || again != lang {
			t.Fatalf("%q is not stable", lang)
		}
	})
}
