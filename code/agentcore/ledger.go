package agentcore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/bedrockagentcore"

	"github.com/agentry-dev/agentry/jail"
)

// DefaultMaxSweep bounds the remote sessions one orphan sweep stops.
const DefaultMaxSweep = 64

// ledger notes, on this machine, the remote sessions a process holds: one
// directory per process (marked with its owner), one file per session
// (named by the session id, holding the interpreter's identifier). A
// process killed before it could stop its sessions leaves its directory;
// the next runner's first Start stops what it lists — only sessions that
// a process which no longer exists opened, never another live one's.
type ledger struct {
	base string
	max  int

	once sync.Once
	dir  string // this process's; "" until the first note
	err  error
}

var ledgers sync.Map // base → *ledger, one per process and base

func ledgerAt(base string, max int) *ledger {
	l, _ := ledgers.LoadOrStore(base, &ledger{base: base, max: max})
	return l.(*ledger)
}

// safeID is a session id fit to be a file name: the service's ids are
// letters and digits.
func safeID(id string) bool {
	if id == "" || len(id) > 200 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func (l *ledger) note(identifier, id string) error {
	l.once.Do(func() {
		l.dir = filepath.Join(l.base, NamePrefix+jail.Self().String())
		if err := os.MkdirAll(l.dir, 0o700); err != nil {
			l.err = err
			return
		}
		l.err = jail.Claim(l.dir)
	})
	if l.err != nil {
		return fmt.Errorf("agentcore: noting the session in the ledger %s: %w; set Options.Ledger to a writable directory", l.base, l.err)
	}
	if !safeID(id) {
		return fmt.Errorf("agentcore: the service's session id %.40q cannot be noted in the ledger", id)
	}
	return os.WriteFile(filepath.Join(l.dir, id), []byte(identifier), 0o600)
}

func (l *ledger) forget(id string) {
	if l.dir != "" && safeID(id) {
		_ = os.Remove(filepath.Join(l.dir, id))
	}
}

// sweep stops the remote sessions that dead processes noted, at most
// l.max of them, each bounded by ctx.
func (l *ledger) sweep(ctx context.Context, client *bedrockagentcore.Client) jail.RunnerSwept {
	out := jail.RunnerSwept{What: "remote-sessions"}
	ents, err := os.ReadDir(l.base)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			out.Error = err.Error()
		}
		return out
	}
	budget := l.max
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), NamePrefix) {
			continue
		}
		dir := filepath.Join(l.base, e.Name())
		o, err := jail.ReadOwner(dir)
		if err != nil || o.Alive() {
			continue
		}
		files, _ := os.ReadDir(dir)
		left := 0
		for _, f := range files {
			if f.Name() == jail.OwnerFile {
				continue
			}
			if budget == 0 || !safeID(f.Name()) {
				left++
				continue
			}
			budget--
			identifier, _ := os.ReadFile(filepath.Join(dir, f.Name()))
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := client.StopCodeInterpreterSession(cctx, &bedrockagentcore.StopCodeInterpreterSessionInput{
				CodeInterpreterIdentifier: aws.String(string(identifier)),
				SessionId:                 aws.String(f.Name()),
			})
			cancel()
			if err != nil && !isCode(err, "ResourceNotFoundException") && !isCode(err, "ValidationException") {
				out.Failed++
				out.Error = wrapErr(opStop, f.Name(), err).Error()
				left++
				continue
			}
			_ = os.Remove(filepath.Join(dir, f.Name()))
			out.Removed++
		}
		if !contains(out.Owners, o.Pid) {
			out.Owners = append(out.Owners, o.Pid)
		}
		if left == 0 {
			_ = os.RemoveAll(dir)
		}
	}
	return out
}

func contains(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
