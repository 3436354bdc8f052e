//go:build !linux

package jail

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os/exec"
)

func owner(fs.FileInfo) (int, int, bool) { return 0, 0, false }

func (s *settings) ready(context.Context) error {
	return fmt.Errorf("%w: jailed agents need Linux (bubblewrap and network namespaces)", ErrNoJail)
}

func (s *settings) launch(ctx context.Context, _ Spec) (*Process, error) { return nil, s.ready(ctx) }

type proc struct {
	s       *settings
	stdin   io.WriteCloser
	stdout  io.ReadCloser
	done    chan struct{}
	exposed map[string]string
	stderr  fmt.Stringer
}

func (p *proc) exitErr() error             { return nil }
func (p *proc) stop(context.Context) error { return nil }
func (p *proc) command(context.Context, []string, string, []string) (*exec.Cmd, error) {
	return nil, fmt.Errorf("%w: jailed agents need Linux", ErrNoJail)
}
