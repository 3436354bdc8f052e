package code

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Cut returns the first max characters (code points) of s and the length
// of s in characters. It never splits a character. max ≤ 0 keeps nothing.
func Cut(s string, max int) (kept string, chars int) {
	n := 0
	for i := range s {
		if n == max {
			return s[:i], n + utf8.RuneCountInString(s[i:])
		}
		n++
	}
	return s, n
}

// maxArtifactLines bounds the artifact lines shown to the model; a longer
// list is cut, and the cut stated.
const maxArtifactLines = 50

// rendering is what the tool shows the model for one execution.
type rendering struct {
	content string
	// chars counts the characters of content.
	chars int
	// cut is true when any stream was cut, by the runner or here.
	cut bool
}

// stagedNote lists the inputs a session holds, for the model.
func stagedNote(staged []Staged) string {
	if len(staged) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "[inputs staged: %d file(s); the environment variable %s maps each name to its path (a JSON object):", len(staged), InputsEnv)
	for _, s := range staged {
		fmt.Fprintf(&b, "\n  %s → %s (%d bytes)", s.Name, s.Path, s.Bytes)
	}
	b.WriteString("]")
	return b.String()
}

// render lays out one result in the order the model reads it: the notes
// the tool has to give first, stdout, stderr, the exit note, artifacts, and
// a reminder to print something when there is nothing at all. Each stream
// is cut at max characters, and every cut is stated with advice. A result
// cut short by a timeout has neither an exit note nor the reminder: the
// caller states the timeout.
func render(notes []string, res Result, max int, timedOut bool) rendering {
	var lines []string
	for _, n := range notes {
		if n != "" {
			lines = append(lines, n)
		}
	}
	cut := false
	stream := func(name, text string, runnerCut bool) string {
		kept, chars := Cut(text, max)
		if !runnerCut && chars <= max {
			// Lines are joined with "\n": the stream's own final newline
			// would only add a blank line.
			return strings.TrimRight(text, "\r\n")
		}
		cut = true
		of := fmt.Sprintf("%d", chars)
		if runnerCut {
			of = runnerOf(res.Truncated, chars)
		}
		return kept + "\n" + fmt.Sprintf("[truncated: showing %d of %s characters of %s. Do not ask for the whole output: "+
			"print a summary, a slice (head/tail) or an aggregate (counts, sums, group-bys) instead.]",
			utf8.RuneCountInString(kept), of, name)
	}
	var tr Truncation
	if res.Truncated != nil {
		tr = *res.Truncated
	}
	if res.Stdout != "" || tr.Stdout {
		lines = append(lines, stream("stdout", res.Stdout, tr.Stdout))
	}
	if res.Stderr != "" || tr.Stderr {
		lines = append(lines, "stderr:\n"+stream("stderr", res.Stderr, tr.Stderr))
	}
	if !res.OK && !timedOut {
		code := "?"
		if res.ExitCode != nil {
			code = fmt.Sprintf("%d", *res.ExitCode)
		}
		lines = append(lines, fmt.Sprintf("[exit %s] the code failed: read stderr above, fix the code and run it again.", code))
	}
	arts := res.Artifacts
	if len(arts) > maxArtifactLines {
		arts = arts[:maxArtifactLines]
	}
	for _, a := range arts {
		if a.URI != "" {
			lines = append(lines, fmt.Sprintf("[artifact: %s, %d bytes, %s]", a.Name, a.Bytes, a.URI))
		} else {
			lines = append(lines, fmt.Sprintf("[artifact: %s, %d bytes]", a.Name, a.Bytes))
		}
	}
	if tr.Artifacts || len(arts) < len(res.Artifacts) {
		cut = true
		of := fmt.Sprintf("%d", len(res.Artifacts))
		switch {
		case tr.Artifacts && tr.OfArtifacts > len(res.Artifacts):
			of = fmt.Sprintf("%d", tr.OfArtifacts)
		case tr.Artifacts:
			of = fmt.Sprintf("more than %d", len(res.Artifacts))
		}
		lines = append(lines, fmt.Sprintf("[artifacts cut: showing %d of %s files the code created or changed. "+
			"Do not rely on this list: have the code list, count or filter the files it needs.]", len(arts), of))
	}
	if !timedOut && res.OK && res.Stdout == "" && res.Stderr == "" && len(res.Artifacts) == 0 && !tr.Stdout && !tr.Stderr && !tr.Artifacts {
		lines = append(lines, "[the code printed nothing: print the value you want to see, e.g. print(result)]")
	}
	content := strings.Join(lines, "\n")
	return rendering{content: content, chars: utf8.RuneCountInString(content), cut: cut}
}

// runnerOf states the original length of a stream the runner already cut.
// Truncation.OfChars is the longest cut stream; when both were cut it is
// exact for one of them only, so the other is stated as a lower bound.
func runnerOf(t *Truncation, received int) string {
	if t == nil || t.OfChars <= received {
		return fmt.Sprintf("more than %d", received)
	}
	if t.Stdout && t.Stderr {
		return fmt.Sprintf("more than %d (up to %d)", received, t.OfChars)
	}
	return fmt.Sprintf("%d", t.OfChars)
}
