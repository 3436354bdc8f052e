package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/agentry-dev/agentry/host"
)

// tokensPoll is how often serve stats the tokens file: a removed token is
// refused within about this long (the bar is 2 s).
const tokensPoll = time.Second

// reloadTokens follows the tokens file: it reloads tf when a stat says
// the file changed and whenever hup delivers (SIGHUP), saying on stderr
// what each reload admitted or why it kept the tokens it had. Without a
// tokens file a SIGHUP is answered with a line and nothing else: it never
// stops serve. It returns the function that stops following.
func reloadTokens(tf *host.TokensFile, hup <-chan os.Signal, stderr io.Writer) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex // one line at a time on stderr
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(stderr, "agentry serve: "+format+"\n", args...)
	}
	if tf != nil {
		wg.Go(func() {
			tf.Watch(ctx, tokensPoll, func(t *host.Tokens, err error) {
				if err != nil {
					say("tokens file: %v", err)
					return
				}
				say("tokens file changed: %d tokens admitted", t.Len())
			})
		})
	}
	if hup != nil {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-hup:
				}
				if tf == nil {
					say("SIGHUP: there is no --tokens file to reload; serving on")
					continue
				}
				if _, err := tf.Reload(); err != nil {
					say("SIGHUP: %v", err)
					continue
				}
				say("SIGHUP: tokens file reloaded: %d tokens admitted", tf.Tokens().Len())
			}
		})
	}
	return func() {
		cancel()
		wg.Wait()
	}
}
