package host_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/agentry-dev/agentry/host"
	"github.com/agentry-dev/agentry/tool"
)

// tarOf builds a tar stream: name → content; a name ending in "->" target
// is a symlink, "=>" a hard link; hdrOnly gives the last entry a header
// claiming size bytes and no body.
func tarOf(t *testing.T, files [][2]string, hdrOnly int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f[0], Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(f[1]))}
		switch {
		case strings.HasPrefix(f[1], "->"):
			h.Typeflag, h.Linkname, h.Size = tar.TypeSymlink, f[1][2:], 0
		case strings.HasPrefix(f[1], "=>"):
			h.Typeflag, h.Linkname, h.Size = tar.TypeLink, f[1][2:], 0
		case f[1] == "chardev":
			h.Typeflag, h.Size = tar.TypeChar, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			_, _ = io.WriteString(tw, f[1])
		}
	}
	if hdrOnly > 0 {
		_ = tw.WriteHeader(&tar.Header{Name: "big", Mode: 0o644, Typeflag: tar.TypeReg, Size: hdrOnly})
		return buf.Bytes()
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// untar reads a downloaded stream into name → content.
func untar(t *testing.T, b []byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("the download is not a tar stream: %v", err)
		}
		c, _ := io.ReadAll(tr)
		out[h.Name] = string(c)
	}
}

const tarType = "application/x-tar"

// TestWorkspaceRoundTrip: a person uploads files into the native agent's
// interpreter, the agent's code edits one, and the download holds the
// edit and every other byte as uploaded.
func TestWorkspaceRoundTrip(t *testing.T) {
	f := newFixture(t, config{tools: []tool.Tool{jailedRunCode(t)}})
	id := f.open("alice")
	bin := strings.Repeat("\x00\x01\xfe\xff", 5000)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(tarOf(t, [][2]string{{"src/notes.txt", "first line\n"}, {"data/blob.bin", bin}, {"src/blob", "->../data/blob.bin"}}, 0))
	_ = zw.Close()
	r := f.do("PUT", "/v1/sessions/"+id+"/workspace", "alice", gz.Bytes(), "Content-Type", "application/gzip")
	want(t, r, 200, "")
	if m := r.json(t); m["entries"] != float64(3) || m["bytes"] != float64(11+len(bin)) {
		t.Fatalf("upload answered %s", r.body)
	}
	out := f.runCode("alice", id, "open('src/notes.txt', 'a').write('added by the agent\\n')\nprint(len(open('data/blob.bin', 'rb').read()))")
	if !strings.Contains(out, "20000") {
		t.Fatalf("the agent did not find the upload: %q", out)
	}
	r = f.do("GET", "/v1/sessions/"+id+"/workspace", "alice", nil)
	want(t, r, 200, "")
	if ct := r.header.Get("Content-Type"); ct != tarType {
		t.Fatalf("download Content-Type %q", ct)
	}
	got := untar(t, r.body)
	if got["src/notes.txt"] != "first line\nadded by the agent\n" || got["data/blob.bin"] != bin {
		t.Fatalf("download lost bytes: notes %q, blob %d bytes", got["src/notes.txt"], len(got["data/blob.bin"]))
	}
	if _, ok := got["src/blob"]; !ok {
		t.Fatalf("the symlink did not come back: %v", keysOf(got))
	}
	// One path.
	r = f.do("GET", "/v1/sessions/"+id+"/workspace?path=src/notes.txt", "alice", nil)
	want(t, r, 200, "")
	if got := untar(t, r.body); len(got) != 1 || got["src/notes.txt"] == "" {
		t.Fatalf("one path: %v", keysOf(got))
	}
	want(t, f.do("GET", "/v1/sessions/"+id+"/workspace?path=nope", "alice", nil), 404, "not_found")
	want(t, f.do("GET", "/v1/sessions/"+id+"/workspace?path=../x", "alice", nil), 400, "invalid_field")
	// Nobody else reaches it.
	want(t, f.do("GET", "/v1/sessions/"+id+"/workspace", "bob", nil), 404, "not_found")
	want(t, f.do("PUT", "/v1/sessions/"+id+"/workspace", "carol", tarOf(t, [][2]string{{"x", "y"}}, 0), "Content-Type", tarType), 404, "not_found")
	if n := len(f.rec.ofType(host.TypeWorkspaceUploaded)); n != 1 {
		t.Fatalf("%d upload events, want 1", n)
	}
}

// TestWorkspaceUploadRefusals: each unsafe archive is refused with its
// code, and the agent's workspace holds nothing of it outside.
func TestWorkspaceUploadRefusals(t *testing.T) {
	f := newFixture(t, config{tools: []tool.Tool{jailedRunCode(t)}, opt: host.Options{WorkspaceMaxEntries: 5}})
	many := make([][2]string, 6)
	for i := range many {
		many[i] = [2]string{"d/f" + string(rune('a'+i)), "x"}
	}
	id := f.open("alice")
	for _, c := range []struct {
		name   string
		body   []byte
		status int
		code   host.Code
	}{
		{"dotdot", tarOf(t, [][2]string{{"../x", "evil"}}, 0), 400, host.CodeWorkspaceUnsafePath},
		{"absolute", tarOf(t, [][2]string{{"/tmp/agentry-evil", "evil"}}, 0), 400, host.CodeWorkspaceUnsafePath},
		{"symlink out", tarOf(t, [][2]string{{"l", "->/etc"}}, 0), 400, host.CodeWorkspaceLinkOutside},
		{"hard link out", tarOf(t, [][2]string{{"h", "=>../../etc/passwd"}}, 0), 400, host.CodeWorkspaceLinkOutside},
		{"device", tarOf(t, [][2]string{{"null", "chardev"}}, 0), 400, host.CodeWorkspaceSpecialFile},
		{"2 GiB", tarOf(t, nil, 2<<30), 413, host.CodeWorkspaceTooLarge},
		{"too many entries", tarOf(t, many, 0), 413, host.CodeWorkspaceTooManyEntries},
		{"garbage", []byte(strings.Repeat("not a tar ", 100)), 400, host.CodeWorkspaceInvalidArchive},
	} {
		r := f.do("PUT", "/v1/sessions/"+id+"/workspace", "alice", c.body, "Content-Type", tarType)
		if r.status != c.status || r.code(t) != string(c.code) {
			t.Fatalf("%s: %d %s, want %d %s", c.name, r.status, r.body, c.status, c.code)
		}
	}
	r := f.do("PUT", "/v1/sessions/"+id+"/workspace", "alice", "{}")
	want(t, r, http.StatusUnsupportedMediaType, "unsupported_media_type")
	// Nothing of the unsafe entries landed: the workspace holds only the
	// entries the too-many upload wrote before its refusal.
	r = f.do("GET", "/v1/sessions/"+id+"/workspace", "alice", nil)
	want(t, r, 200, "")
	got := untar(t, r.body)
	delete(got, "d/")
	for i := range 5 {
		delete(got, many[i][0])
	}
	if len(got) != 0 {
		t.Fatalf("refused uploads left %v", keysOf(got))
	}
	if out := f.runCode("alice", id, "import os\nprint(os.path.exists('/tmp/agentry-evil'))"); !strings.Contains(out, "False") {
		t.Fatalf("an absolute name landed: %q", out)
	}
}

// TestWorkspaceUnsupported: a provider whose sessions keep no files says
// so by name; closing a conversation drops its workspace.
func TestWorkspaceUnsupported(t *testing.T) {
	dropped := make(chan string, 4)
	f := newFixture(t, config{kind: onFake, opt: host.Options{DropWorkspace: func(o tool.Identity, id string) error {
		dropped <- o.Principal + "/" + id
		return nil
	}}})
	id := f.open("alice")
	want(t, f.do("GET", "/v1/sessions/"+id+"/workspace", "alice", nil), 501, string(host.CodeWorkspaceUnsupported))
	want(t, f.do("DELETE", "/v1/sessions/"+id, "alice", nil), 204, "")
	// The workspace goes with its conversation, once.
	want(t, f.do("DELETE", "/v1/sessions/"+id, "alice", nil), 204, "")
	if got := <-dropped; got != "alice/"+id || len(dropped) != 0 {
		t.Fatalf("dropped %q (and %d more), want alice's %s once", got, len(dropped), id)
	}
	want(t, f.do("GET", "/v1/sessions/"+id+"/workspace", "alice", nil), 409, "session_closed")
}

func keysOf(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}
