package agentcore

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/bedrockagentcore/types"

	"github.com/agentry-dev/agentry/code"
)

// collector folds the result events of one InvokeCodeInterpreter stream
// into a code.Result, keeping at most limit characters of each stream
// while counting all of them.
//
// Where an event carries structured content (stdout, stderr, exitCode),
// that is the output and the event's text blocks, which repeat it, are
// skipped. Otherwise text blocks are the output: stdout, or stderr when
// the event says isError. Every other block (image, resource, resource
// link) is reported as an artifact.
//
// Artifacts stay nil unless the service sent such a block: the service
// does not list the files code writes, so having seen none is not a claim
// that none were produced (the port's "does not report" meaning).
type collector struct {
	stdout, stderr capped
	exit           *int
	isError        bool
	results        int
	artifacts      []code.Artifact
}

func newCollector(limit int) *collector {
	return &collector{stdout: capped{limit: limit}, stderr: capped{limit: limit}}
}

func (c *collector) add(r *types.CodeInterpreterResult) {
	c.results++
	eventErr := aws.ToBool(r.IsError)
	if eventErr {
		c.isError = true
	}
	sc := r.StructuredContent
	structured := sc != nil && (sc.Stdout != nil || sc.Stderr != nil || sc.ExitCode != nil)
	if structured {
		c.stdout.write(aws.ToString(sc.Stdout))
		c.stderr.write(aws.ToString(sc.Stderr))
		if sc.ExitCode != nil {
			v := int(*sc.ExitCode)
			c.exit = &v
		}
	}
	for i := range r.Content {
		b := &r.Content[i]
		if b.Type == types.ContentBlockTypeText {
			if structured {
				continue
			}
			if eventErr {
				c.stderr.writeBlock(aws.ToString(b.Text))
			} else {
				c.stdout.writeBlock(aws.ToString(b.Text))
			}
			continue
		}
		c.artifacts = append(c.artifacts, artifactOf(b, len(c.artifacts)+1))
	}
}

func (c *collector) result() code.Result {
	res := code.Result{
		Stdout:    c.stdout.String(),
		Stderr:    c.stderr.String(),
		ExitCode:  c.exit,
		Artifacts: c.artifacts,
		OK:        !c.isError && (c.exit == nil || *c.exit == 0),
	}
	if c.stdout.cut() || c.stderr.cut() {
		t := &code.Truncation{Stdout: c.stdout.cut(), Stderr: c.stderr.cut()}
		if t.Stdout {
			t.OfChars = c.stdout.chars
		}
		if t.Stderr && c.stderr.chars > t.OfChars {
			t.OfChars = c.stderr.chars
		}
		res.Truncated = t
	}
	return res
}

// maxLabel bounds an artifact's name and URI.
const maxLabel = 256

func artifactOf(b *types.ContentBlock, n int) code.Artifact {
	a := code.Artifact{Name: aws.ToString(b.Name), URI: aws.ToString(b.Uri)}
	if a.Name == "" {
		kind := string(b.Type)
		if kind == "" {
			kind = "output"
		}
		a.Name = fmt.Sprintf("%s-%d", kind, n)
	}
	switch {
	case b.Size != nil:
		a.Bytes = *b.Size
	case len(b.Data) > 0:
		a.Bytes = int64(len(b.Data))
	case b.Resource != nil && len(b.Resource.Blob) > 0:
		a.Bytes = int64(len(b.Resource.Blob))
	case b.Resource != nil:
		a.Bytes = int64(len(aws.ToString(b.Resource.Text)))
	}
	if a.URI == "" && b.Resource != nil {
		a.URI = aws.ToString(b.Resource.Uri)
	}
	a.Name, _ = prefixRunes(a.Name, maxLabel)
	a.URI, _ = prefixRunes(a.URI, maxLabel)
	return a
}

// capped keeps the first limit characters written to it and counts all.
type capped struct {
	b      strings.Builder
	limit  int
	chars  int
	lastNL bool
}

func (c *capped) write(s string) {
	if s == "" {
		return
	}
	// The service sends valid UTF-8; should a fragment not be, it is
	// repaired here so counts never depend on how output was chunked.
	s = strings.ToValidUTF8(s, "\uFFFD")
	room := c.limit - c.chars
	head, n := prefixRunes(s, max(room, 0))
	c.b.WriteString(head)
	c.chars += n
	c.lastNL = s[len(s)-1] == '\n'
}

// writeBlock writes one text block, on a line of its own.
func (c *capped) writeBlock(s string) {
	if c.chars > 0 && !c.lastNL && s != "" {
		c.write("\n")
	}
	c.write(s)
}

func (c *capped) cut() bool      { return c.chars > c.limit }
func (c *capped) String() string { return c.b.String() }

// prefixRunes returns the first n characters of s and how many characters
// s has. Invalid UTF-8 counts one character per byte, as range does.
func prefixRunes(s string, n int) (string, int) {
	total := utf8.RuneCountInString(s)
	if total <= n {
		return s, total
	}
	i := 0
	for at := range s {
		if i == n {
			return s[:at], total
		}
		i++
	}
	return s, total
}
