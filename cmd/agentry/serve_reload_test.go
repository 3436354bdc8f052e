package main

import (
	"strings"
	"testing"

	"github.com/agentry-dev/agentry/host"
)

// TestEmptiedTokensFileRevokesEveryone: a tokens file emptied while serve
// runs is admitted, so every token it held is refused from then on; only a
// file that would widen who is served past one principal is refused.
func TestEmptiedTokensFileRevokesEveryone(t *testing.T) {
	s := &server{o: serveOptions{reach: exposure{command: "serve", addr: "127.0.0.1:0", tokens: "t", principals: 1}}}
	empty, err := host.ParseTokens(strings.NewReader("# every token revoked\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.admitTokens("t")(empty); err != nil {
		t.Fatalf("an emptied tokens file was refused: %v", err)
	}
}
