package main

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentry-dev/agentry/host"
)

// tokensPoll is how often serve stats the tokens file: a removed token is
// refused within about this long (the bar is 2 s).
const tokensPoll = time.Second

// tokensAuth is the authenticator of a serve with a tokens file: the
// host.TokensFile that follows the file's edits (a stat a tick, and a
// reload on SIGHUP). A --config reload that names another tokens file
// puts that one here, and the watch moves over to it.
type tokensAuth struct {
	cur   atomic.Pointer[host.TokensFile]
	path  string        // of cur; read and written by reloads only, which run one at a time
	moved chan struct{} // told when cur is replaced
}

func newTokensAuth(path string, tf *host.TokensFile) *tokensAuth {
	a := &tokensAuth{path: path, moved: make(chan struct{}, 1)}
	a.cur.Store(tf)
	return a
}

// Authenticate asks the tokens file as last read.
func (a *tokensAuth) Authenticate(r *http.Request) (host.Caller, error) {
	return a.cur.Load().Authenticate(r)
}

// followTokens makes the tokens file follow its edits while serve runs:
// the watch reloads it when a stat says it changed (saying on stderr what
// each reload admitted or why it kept the tokens it had), and the tokens
// key's reload (on SIGHUP or a --config change) reads it again. The
// cleanup stack stops the watch.
func (s *server) followTokens() {
	ta := s.o.tokensFile
	ta.cur.Load().SetCheck(s.admitTokens(ta.path))
	s.running["tokens"] = ta.path
	s.onReload("tokens", s.reloadTokens(ta))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	report := func(t *host.Tokens, err error) {
		if err != nil {
			fmt.Fprintf(s.stderr, "agentry serve: tokens file: %v\n", err)
			return
		}
		fmt.Fprintf(s.stderr, "agentry serve: tokens file changed: %d tokens admitted\n", t.Len())
	}
	wg.Go(func() {
		for {
			wctx, stop := context.WithCancel(ctx)
			var watch sync.WaitGroup
			watch.Go(func() { ta.cur.Load().Watch(wctx, tokensPoll, report) })
			select {
			case <-ctx.Done():
			case <-ta.moved:
			}
			stop()
			watch.Wait()
			if ctx.Err() != nil {
				return
			}
		}
	})
	s.undo.PushFunc(func() {
		cancel()
		wg.Wait()
	})
}

// admitTokens is what every read of the tokens file at path must pass
// before it is admitted: it refuses one that admits several principals
// when serve started for one (serve then chose its runner for one person:
// a restart decides again, jailed or refused). A file emptied on purpose is
// admitted: it revokes everyone, which is what its operator asked for.
func (s *server) admitTokens(path string) func(*host.Tokens) error {
	return func(t *host.Tokens) error {
		owners := len(t.Owners())
		next := s.o.reach
		next.principals = owners
		if next.several() && !s.o.reach.several() {
			return fmt.Errorf("%s admits %d principals, and serve started for one: restart it so that it jails model-written code for several (or refuses to)", path, owners)
		}
		return nil
	}
}

// reloadTokens is the tokens key's reload: it reads the tokens file again
// (host.TokensFile.Reload), or, when --config now names another file,
// opens that one and serves its tokens from then on.
func (s *server) reloadTokens(ta *tokensAuth) reloadHook {
	return func(path string) (string, error) {
		if path == "" {
			return "", fmt.Errorf("serve started with a tokens file; going without one needs a restart")
		}
		if path == ta.path {
			if _, err := ta.cur.Load().Reload(); err != nil {
				return "", err
			}
		} else {
			tf, err := host.OpenTokensFile(path)
			if err != nil {
				return "", err
			}
			if err := s.admitTokens(path)(tf.Tokens()); err != nil {
				return "", err
			}
			tf.SetCheck(s.admitTokens(path))
			ta.cur.Store(tf)
			ta.path = path
			select {
			case ta.moved <- struct{}{}:
			default:
			}
		}
		t := ta.cur.Load().Tokens()
		return fmt.Sprintf("%d tokens, %d principals", t.Len(), len(t.Owners())), nil
	}
}
