package agentcore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/bedrockagentcore"
	"github.com/aws/aws-sdk-go-v2/service/bedrockagentcore/types"
	"github.com/aws/smithy-go"

	"github.com/agentry-dev/agentry/code"
)

// Session is one live AgentCore Code Interpreter session: variables,
// imports and files persist from one execute to the next until Stop or
// the service's session timeout.
//
// It has no staging. It deliberately does not implement code.Stager, so
// code.NewTool refuses, by name, a call that hands it inputs; put data in
// the code itself or fetch it from S3 inside the sandbox.
//
// A Session is safe for concurrent use; the service runs one execute at a
// time per session.
type Session struct {
	runner *Runner
	id     string
	name   string
	lang   types.ProgrammingLanguage

	mu      sync.Mutex
	stopped bool  // Stop was called: every later execute fails
	gone    bool  // the service confirmed the session is over
	broken  error // why the session's state is unknown; nil while healthy

	stopSem chan struct{} // one StopCodeInterpreterSession at a time
}

var _ code.Session = (*Session)(nil)

// ID is the service's session id.
func (s *Session) ID() string { return s.id }

// Name is the session's remote name, "agentry-" and the key's digest.
func (s *Session) Name() string { return s.name }

// Execute runs code with the executeCode tool and drains the result
// stream to its end. req.Language overrides the session's language;
// req.Timeout overrides the runner's execute timeout.
//
// A non-zero exit or an isError result is a Result with OK false. Errors
// mean the code could not run: an unsupported language, a stopped or
// broken session, a timeout (which breaks the session, since the code may
// still be running remotely), a cancelled context, or a service exception
// (an [*APIError] named after it).
func (s *Session) Execute(ctx context.Context, req code.ExecRequest) (code.Result, error) {
	if err := s.usable(); err != nil {
		return code.Result{}, err
	}
	lang := s.lang
	if req.Language != "" {
		l, err := Language(req.Language)
		if err != nil {
			return code.Result{}, err
		}
		lang = l
	}
	if req.Code == "" {
		return code.Result{}, errors.New("agentcore: execute: the code is empty: send the code to run")
	}
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = s.runner.execTimeout
	}
	if err := ctx.Err(); err != nil {
		// Nothing was sent: the session is as it was.
		return code.Result{}, fmt.Errorf("agentcore: execute in session %s: %w", s.id, context.Cause(ctx))
	}
	ictx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	out, err := s.runner.client.InvokeCodeInterpreter(ictx, &bedrockagentcore.InvokeCodeInterpreterInput{
		CodeInterpreterIdentifier: aws.String(s.runner.identifier),
		SessionId:                 aws.String(s.id),
		Name:                      types.ToolNameExecuteCode,
		Arguments:                 &types.ToolArguments{Code: aws.String(req.Code), Language: lang},
	}, func(o *bedrockagentcore.Options) {
		// Running code is not idempotent: a retried request could run it
		// twice. Throttling comes back as a named error instead.
		o.RetryMaxAttempts = 1
	})
	if err != nil {
		var ae smithy.APIError
		if !errors.As(err, &ae) && ictx.Err() != nil {
			return code.Result{}, s.abandoned(ctx, timeout)
		}
		if isCode(err, "ResourceNotFoundException") {
			return code.Result{}, s.vanished(err)
		}
		return code.Result{}, wrapErr(opExecute, s.id, err)
	}
	stream := out.GetStream()
	defer stream.Close()

	col := newCollector(s.runner.maxChars)
	events := stream.Events()
drain:
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				break drain
			}
			if res, isResult := ev.(*types.CodeInterpreterStreamOutputMemberResult); isResult {
				col.add(&res.Value)
			}
			// Other members are events this client does not know yet;
			// reading past them is what draining means.
		case <-ictx.Done():
			return code.Result{}, s.abandoned(ctx, timeout)
		}
	}
	if err := stream.Err(); err != nil {
		var ae smithy.APIError
		switch {
		case !errors.As(err, &ae) && ictx.Err() != nil:
			// The stream broke because we stopped waiting.
			return code.Result{}, s.abandoned(ctx, timeout)
		case isCode(err, "ResourceNotFoundException"):
			return code.Result{}, s.vanished(err)
		case errors.As(err, &ae):
			// An exception event: the service said what went wrong.
			return code.Result{}, wrapErr(opExecute, s.id, err)
		default:
			// The stream was cut or garbled: the code may have run in part.
			s.breakWith("its result stream was cut off")
			return code.Result{}, &failure{
				msg: fmt.Sprintf("agentcore: execute in session %s: the result stream failed (%v), so the code may have run in part and the session is broken: stop it and start a new one", s.id, err),
				is:  []error{ErrBroken},
				err: err,
			}
		}
	}
	if col.results == 0 {
		return code.Result{}, fmt.Errorf("agentcore: execute in session %s: the service ended the stream without a result", s.id)
	}
	return col.result(), nil
}

// abandoned reports an execute that stopped waiting, cancelled by the
// caller or timed out, before the service finished answering. The request
// may have reached the service and the code may still be running there,
// so the session's state is unknown from here on: mark it broken.
func (s *Session) abandoned(parent context.Context, timeout time.Duration) error {
	if parent.Err() != nil {
		s.breakWith("an execute was cancelled while running")
		return fmt.Errorf("agentcore: execute in session %s abandoned: %w", s.id, context.Cause(parent))
	}
	s.breakWith(fmt.Sprintf("an execute timed out after %v", timeout))
	return &failure{
		msg: fmt.Sprintf("agentcore: execute in session %s timed out after %v; the code may still be running there, so the session is broken: stop it and start a new one", s.id, timeout),
		is:  []error{ErrExecTimeout, ErrBroken},
	}
}

func (s *Session) usable() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return fmt.Errorf("%w: %s (%s): start a new session", ErrStopped, s.id, s.name)
	}
	if s.broken != nil {
		return fmt.Errorf("%w: %s (%s): %v: stop it and start a new one", ErrBroken, s.id, s.name, s.broken)
	}
	return nil
}

// vanished handles ResourceNotFoundException on an execute: the service no
// longer knows the session (it expired or was stopped elsewhere).
func (s *Session) vanished(err error) error {
	s.breakWith("the service no longer knows it (expired or stopped)")
	api := wrapErr(opExecute, s.id, err)
	return &failure{msg: api.Error(), is: []error{ErrBroken}, err: api}
}

func (s *Session) breakWith(why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken == nil {
		s.broken = errors.New(why)
	}
}

// Stop ends the remote session. It is idempotent: once the service has
// confirmed the end, later calls return nil at once. A session the
// service already reaped (ResourceNotFoundException or
// ValidationException) counts as stopped. A failed Stop may be retried.
func (s *Session) Stop(ctx context.Context) error {
	s.mu.Lock()
	s.stopped = true
	gone := s.gone
	s.mu.Unlock()
	if gone {
		return nil
	}
	select {
	case s.stopSem <- struct{}{}:
		defer func() { <-s.stopSem }()
	case <-ctx.Done():
		return fmt.Errorf("agentcore: stop session %s: %w", s.id, ctx.Err())
	}
	s.mu.Lock()
	gone = s.gone
	s.mu.Unlock()
	if gone {
		return nil
	}
	_, err := s.runner.client.StopCodeInterpreterSession(ctx, &bedrockagentcore.StopCodeInterpreterSessionInput{
		CodeInterpreterIdentifier: aws.String(s.runner.identifier),
		SessionId:                 aws.String(s.id),
	})
	if err != nil && !isCode(err, "ResourceNotFoundException") && !isCode(err, "ValidationException") {
		return wrapErr(opStop, s.id, err)
	}
	s.mu.Lock()
	s.gone = true
	s.mu.Unlock()
	s.runner.ledger.forget(s.id)
	return nil
}
