package host

import (
	"context"
	"time"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/tool"
)

// Defaults of the retention of closed conversations (Options).
const (
	DefaultRetainClosed   = 30 * 24 * time.Hour
	DefaultRetentionEvery = time.Hour
)

// sweepBatch is how many conversations one store call removes, so a
// sweep never holds a long transaction.
const sweepBatch = 500

// TypeConversationsSwept: the retention sweep removed closed
// conversations kept past Options.RetainClosed.
const TypeConversationsSwept event.Type = "agentry.host.sessions_swept"

func init() { event.Register(TypeConversationsSwept, func() any { return new(SweepEvent) }) }

// SweepEvent is the payload of sessions_swept.
type SweepEvent struct {
	// Removed counts the conversations removed; ClosedBefore is the
	// cut-off: each was closed (last changed) before it.
	Removed      int       `json:"removed"`
	ClosedBefore time.Time `json:"closedBefore"`
}

// retention is the background sweep's goroutine, owned by the host.
type retention struct {
	stop chan struct{}
	done chan struct{}
}

// startRetention starts the periodic sweep unless it is turned off.
func (h *Host) startRetention() {
	if h.opt.RetainClosed < 0 || h.opt.RetentionEvery < 0 {
		return
	}
	h.retain = &retention{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(h.retain.done)
		t := time.NewTicker(h.opt.RetentionEvery)
		defer t.Stop()
		for {
			select {
			case <-h.retain.stop:
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(context.Background(), h.opt.RetentionEvery)
				go func() { // a shutdown stops a long sweep
					select {
					case <-h.retain.stop:
						cancel()
					case <-ctx.Done():
					}
				}()
				if _, err := h.SweepClosed(ctx); err != nil {
					h.log.Warn("host: the retention sweep of closed conversations failed; it runs again next period", "err", err)
				}
				cancel()
			}
		}
	}()
}

// stopRetention stops the sweep and waits for it.
func (h *Host) stopRetention() {
	if h.retain != nil {
		close(h.retain.stop)
		<-h.retain.done
	}
}

// SweepClosed removes the conversations closed (and unchanged since)
// longer than Options.RetainClosed ago, with their transcripts, turn
// logs and provider records; their usage records stay, as what was
// billed. Options.DropWorkspace is called again for each, so what their
// close left of their workspaces (a removal that failed) goes now. It
// returns how many it removed. The background sweep calls it
// every Options.RetentionEvery; so can a caller. With several replicas
// any may sweep: removing is idempotent, and a closed conversation never
// changes.
func (h *Host) SweepClosed(ctx context.Context) (int, error) {
	if h.opt.RetainClosed < 0 {
		return 0, nil
	}
	cutoff := h.now().Add(-h.opt.RetainClosed).UTC()
	total := 0
	for {
		swept, err := h.store.SweepClosed(ctx, cutoff, sweepBatch)
		total += len(swept)
		h.dropSwept(swept)
		if err != nil {
			h.reportSweep(total, cutoff)
			return total, err
		}
		if len(swept) < sweepBatch {
			break
		}
	}
	h.reportSweep(total, cutoff)
	return total, nil
}

// dropSwept removes what is left of the swept conversations' workspaces
// (Options.DropWorkspace: removing is idempotent); a failure is logged.
func (h *Host) dropSwept(swept []Swept) {
	if h.opt.DropWorkspace == nil {
		return
	}
	for _, c := range swept {
		if err := h.opt.DropWorkspace(c.Owner, c.ID); err != nil {
			h.log.Error("host: removing a swept conversation's workspace", "session", c.ID, "err", err)
		}
	}
}

func (h *Host) reportSweep(n int, cutoff time.Time) {
	if n == 0 {
		return
	}
	h.emit(TypeConversationsSwept, &SweepEvent{Removed: n, ClosedBefore: cutoff}, "", tool.Identity{})
}
