package local

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/agentry-dev/agentry/toolsession"
)

// poolPrefix names a pool member's directory until it is taken.
const poolPrefix = sessionPrefix + "pool-"

// pool keeps up to size interpreters started and unused. One goroutine,
// started by the first take or Warm and ended by Close, owns the
// starting; ready is guarded by mu.
type pool struct {
	r      *Interpreter
	size   int
	refill time.Duration

	mu      sync.Mutex
	ready   []*interpSession
	lastErr error // of the latest start, when it failed
	running bool
	closed  bool
	changed chan struct{} // wakes the filler (capacity 1)
	filled  chan struct{} // closed and replaced whenever ready grows
	stop    context.CancelFunc
	done    chan struct{}
}

func newPool(r *Interpreter, p Pool) *pool {
	return &pool{r: r, size: p.Size, refill: p.Refill, changed: make(chan struct{}, 1), filled: make(chan struct{}), done: make(chan struct{})}
}

// take hands out a ready interpreter, or nil when none is (the caller
// then starts one itself). It wakes the filler either way.
func (p *pool) take() *interpSession {
	p.mu.Lock()
	p.run()
	var s *interpSession
	for len(p.ready) > 0 && s == nil {
		s = p.ready[0]
		p.ready = p.ready[1:]
		select {
		case <-s.exited: // died while it waited: never hand it out
			go s.Stop(context.Background())
			s = nil
		default:
		}
	}
	p.mu.Unlock()
	p.wake()
	return s
}

func (p *pool) wake() {
	select {
	case p.changed <- struct{}{}:
	default:
	}
}

// run starts the filler once; call with mu held.
func (p *pool) run() {
	if p.running || p.closed {
		return
	}
	p.running = true
	ctx, cancel := context.WithCancel(context.Background())
	p.stop = cancel
	go p.fill(ctx)
}

// fill keeps the pool full, one start at a time and at most one per
// refill interval, the first one interval after the take that made room;
// a failed start backs off (up to 5s) rather than spin.
func (p *pool) fill(ctx context.Context) {
	defer close(p.done)
	prog, perr := p.r.s.program("python")
	backoff := p.refill
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		p.mu.Lock()
		need := len(p.ready) < p.size
		p.mu.Unlock()
		if !need {
			select {
			case <-ctx.Done():
				return
			case <-p.changed:
				// A take: let its first execute have the machine for
				// one interval before a replacement starts beside it.
				t.Reset(p.refill)
				continue
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := perr
		var s *interpSession
		if err == nil {
			err = p.r.s.start(ctx, p.r.ID())
		}
		if err == nil {
			s, err = p.r.open(ctx, "", poolPrefix, prog)
		}
		wait := p.refill
		if err != nil {
			backoff = min(2*backoff, 5*time.Second)
			wait = backoff
			p.mu.Lock()
			p.lastErr = err
			close(p.filled)
			p.filled = make(chan struct{})
			p.mu.Unlock()
		} else {
			backoff = p.refill
			p.mu.Lock()
			if p.closed {
				p.mu.Unlock()
				s.Stop(context.Background())
				return
			}
			p.ready = append(p.ready, s)
			p.lastErr = nil
			close(p.filled)
			p.filled = make(chan struct{})
			p.mu.Unlock()
		}
		t.Reset(wait)
	}
}

// warm waits until the pool is full.
func (p *pool) warm(ctx context.Context) error {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return errors.New("local: the runner is closed; its pool starts no more interpreters")
		}
		p.run()
		full, filled := len(p.ready) >= p.size, p.filled
		p.mu.Unlock()
		if full {
			return nil
		}
		p.wake()
		select {
		case <-filled:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		p.mu.Lock()
		err := p.lastErr
		p.mu.Unlock()
		if err != nil {
			return fmt.Errorf("local: the pool could not start an interpreter: %w", err)
		}
	}
}

// close stops the filler and every interpreter still waiting, bounded by
// ctx.
func (p *pool) close(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	ready := p.ready
	p.ready = nil
	running := p.running
	if p.stop != nil {
		p.stop()
	}
	p.mu.Unlock()
	if running {
		select {
		case <-p.done:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	var errs []error
	for _, s := range ready {
		errs = append(errs, s.Stop(ctx))
	}
	return errors.Join(errs...)
}

func (p *pool) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

func (p *pool) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready)
}

// bind gives a pool member to the session of key: its directory is
// renamed after the key's digest, like a directory made for that key.
func (s *interpSession) bind(key string) error {
	old := s.cell.Root()
	suffix := strings.TrimPrefix(filepath.Base(old), poolPrefix)
	root := filepath.Join(filepath.Dir(old), sessionPrefix+toolsession.HashKey(key)+"-"+suffix)
	s.mu.Lock()
	err := s.cell.Rename(root)
	if err == nil {
		s.id = filepath.Base(root)
		s.snap = nil
	}
	s.mu.Unlock()
	if err != nil {
		return errors.New("local: handing a pooled interpreter to its session: " + err.Error())
	}
	s.watch.close()
	s.watch = newDirWatch(workDir(s.cell))
	return nil
}
