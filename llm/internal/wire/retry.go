// Package wire is what the model adapters share about talking HTTP to a
// model server: a bounded retry policy that honours Retry-After, a capture
// of error responses, the mapping of failures to [llm.APIError] with a fix
// in its text, and the assembly of tool calls streamed in pieces.
//
// It promises that no error it builds carries the API key, that every wait
// is bounded and stops when the context ends, and that streamed arguments
// are bounded in size and checked to be JSON before they leave.
package wire

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/agentry-dev/agentry/llm"
)

// Defaults of [Policy].
const (
	DefaultMaxRetries = 3
	DefaultMaxWait    = time.Minute
	baseDelay         = 500 * time.Millisecond
	capDelay          = 8 * time.Second
)

// Policy decides whether a failed attempt is tried again and how long to
// wait first. The zero value retries 3 times with exponential backoff from
// 0.5s to 8s and honours a Retry-After of up to one minute.
type Policy struct {
	// MaxRetries is how many times a failed attempt is repeated; 0 means
	// DefaultMaxRetries, negative means never.
	MaxRetries int
	// MaxWait is the longest server-requested wait honoured; a longer one
	// ends the retries at once. 0 means DefaultMaxWait.
	MaxWait time.Duration
	// Sleep waits d or until ctx ends; nil uses a timer. Tests inject one
	// that records the waits and returns at once.
	Sleep func(ctx context.Context, d time.Duration) error
}

func (p Policy) retries() int {
	switch {
	case p.MaxRetries < 0:
		return 0
	case p.MaxRetries == 0:
		return DefaultMaxRetries
	}
	return p.MaxRetries
}

func (p Policy) maxWait() time.Duration {
	if p.MaxWait <= 0 {
		return DefaultMaxWait
	}
	return p.MaxWait
}

// Retryable reports whether err is worth another attempt: a rate limit or
// a server-side failure, never a refusal of the request itself.
func Retryable(err error) bool {
	return errors.Is(err, llm.ErrRateLimited) || errors.Is(err, llm.ErrServer)
}

// Retry is called after attempt n (counting from 1) failed with err. It
// returns nil after waiting when the attempt should be made again, and
// otherwise the error to give the caller: err with the attempt count set,
// or the context's error when ctx ended during the wait.
func (p Policy) Retry(ctx context.Context, n int, err error) error {
	var ae *llm.APIError
	if errors.As(err, &ae) {
		ae.Attempts = n
	}
	if ctx.Err() != nil {
		return Stopped(ctx)
	}
	if ae == nil || !Retryable(err) || n > p.retries() {
		return err
	}
	wait := Backoff(n)
	if ae.RetryAfter > 0 {
		if ae.RetryAfter > p.maxWait() {
			ae.Fix = fmt.Sprintf("the server asks to wait %s, longer than this client waits (%s); try again later", ae.RetryAfter, p.maxWait())
			return err
		}
		wait = ae.RetryAfter
	}
	sleep := p.Sleep
	if sleep == nil {
		sleep = Sleep
	}
	if serr := sleep(ctx, wait); serr != nil {
		return Stopped(ctx)
	}
	return nil
}

// Backoff is the wait before retry n (from 1) when the server named none:
// 0.5s doubling up to 8s, less up to a quarter of jitter so that many
// clients do not retry in step.
func Backoff(n int) time.Duration {
	d := capDelay
	if n < 5 {
		d = baseDelay << (n - 1)
	}
	return d - time.Duration(rand.Int64N(int64(d/4)+1))
}

// Sleep waits d, or until ctx ends (then it returns ctx's error).
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stopped is the error for a request that ctx ended: it wraps ctx's error
// (and its cause) so errors.Is(err, context.Canceled) holds.
func Stopped(ctx context.Context) error {
	cause := context.Cause(ctx)
	if cause == nil || errors.Is(cause, ctx.Err()) {
		return fmt.Errorf("model request stopped: %w", ctx.Err())
	}
	return fmt.Errorf("model request stopped: %w (%w)", ctx.Err(), cause)
}

// Stream runs one streamed request, retrying it under the policy while it
// fails before yielding anything: once a chunk reached the caller, a retry
// would repeat it, so a later failure is yielded as the stream's error.
// once reports whether it yielded. ctx is cancelled when Stream returns,
// which stops the request when the caller breaks out of its loop.
func (p Policy) Stream(ctx context.Context, once func(context.Context) (yielded bool, err error), yield func(llm.Chunk, error) bool) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for n := 1; ; n++ {
		yielded, err := once(ctx)
		if err == nil {
			return
		}
		if !yielded {
			if err = p.Retry(ctx, n, err); err == nil {
				continue
			}
		}
		yield(llm.Chunk{}, err)
		return
	}
}
