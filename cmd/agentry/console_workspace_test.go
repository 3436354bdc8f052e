package main

import (
	"archive/tar"
	"bytes"
	"encoding/base64"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// The workspace in the console, in a real headless Chromium against a
// real agentry serve: the person uploads two files (one with markup in
// its name's neighbour, its text), the list shows them with their sizes,
// the host holds the bytes (read back through the API), and a file's
// Download hands the browser the tar the host sent for it.
func TestBrowserConsoleWorkspace(t *testing.T) {
	axe := axeScript(t)
	actx, s, toks := consoleServe(t, "alice")
	b := openTab(t, actx, artifactDir(t))
	b.signIn(s.url, toks["alice"])
	b.do("start", chromedp.Click(chromedp.ID("new-conv")), chromedp.WaitVisible(chromedp.ID("conv-body")))
	id := strings.TrimPrefix(eval[string](b, "location.hash"), "#")
	b.do("list the files", chromedp.Click(chromedp.ID("ws-list-button")))
	b.until("the empty workspace", `document.getElementById("ws-state").textContent === "The workspace is empty."`)

	dir := t.TempDir()
	hello, data := filepath.Join(dir, "hello.txt"), filepath.Join(dir, "data.csv")
	if err := os.WriteFile(hello, []byte("<script>alert(1)</script>\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(data, bytes.Repeat([]byte("1,2,3\n"), 500), 0o644); err != nil {
		t.Fatal(err)
	}
	b.do("choose files", chromedp.SetUploadFiles(chromedp.ID("ws-files"), []string{hello, data}))
	b.do("upload", chromedp.Click(chromedp.ID("ws-upload")))
	b.until("the files listed", `document.querySelectorAll("#ws-list li").length === 2`)
	rows := eval[[]string](b, `[...document.querySelectorAll("#ws-list li")].map((li) => [...li.children].map((c) => c.textContent).join(" | "))`)
	if got := strings.Join(rows, "\n"); !strings.Contains(got, "hello.txt | 26 B | Download") || !strings.Contains(got, "data.csv | 2.9 KiB | Download") {
		t.Fatalf("the list:\n%s", got)
	}
	if st := b.text("#ws-state"); st != "2 files." {
		t.Fatalf("the workspace says %q", st)
	}

	// The host holds the bytes.
	req, _ := http.NewRequest("GET", s.url+"/v1/sessions/"+id+"/workspace?path=hello.txt", nil)
	req.Header.Set("Authorization", "Bearer "+toks["alice"])
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if got := tarFile(t, res.Body, "hello.txt"); got != "<script>alert(1)</script>\n" {
		t.Fatalf("the host holds %q", got)
	}

	// Download: the console hands the browser the tar the host sent.
	eval[bool](b, `(() => { window.__blobs = []; const make = URL.createObjectURL; URL.createObjectURL = (x) => { window.__blobs.push(x); return make(x); }; return true; })()`)
	b.do("download hello.txt", chromedp.Click(chromedp.CSS(`#ws-list button[aria-label="Download hello.txt"]`)))
	b.until("the download", `window.__blobs.length === 1 && document.getElementById("ws-state").textContent.startsWith("Downloaded hello.txt")`)
	raw := eval[string](b, `window.__blobs[0].arrayBuffer().then((a) => btoa(String.fromCharCode(...new Uint8Array(a))))`)
	tarBytes, err := base64.StdEncoding.DecodeString(raw)
	if err != nil {
		t.Fatal(err)
	}
	if got := tarFile(t, bytes.NewReader(tarBytes), "hello.txt"); got != "<script>alert(1)</script>\n" {
		t.Fatalf("the download holds %q", got)
	}
	if n := eval[int](b, `document.querySelectorAll("#ws-list script").length`); n != 0 {
		t.Fatal("a file's name or bytes became markup")
	}
	b.shot("workspace")
	b.accessible(axe, "the workspace")
	b.clean()
}

// tarFile is the content of the named file in a tar stream.
func tarFile(t *testing.T, r io.Reader, name string) string {
	t.Helper()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("no %s in the archive: %v", name, err)
		}
		if strings.TrimPrefix(h.Name, "./") == name {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		}
	}
}
