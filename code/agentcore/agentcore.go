// Package agentcore runs model-written code in AWS Bedrock AgentCore Code
// Interpreter sessions, behind the code.Runner port.
//
// A [Runner] opens one remote session per isolation key
// (StartCodeInterpreterSession), executes code in it with the executeCode
// tool (InvokeCodeInterpreter, whose event stream is always drained to the
// end), and stops it (StopCodeInterpreterSession). What it promises:
//
//   - The raw isolation key never leaves the process. The remote session is
//     named "agentry-" + toolsession.HashKey(key); nothing else derived from
//     the key is sent.
//   - The service's exceptions, whether an HTTP error or an exception event
//     inside the stream, come back as an [*APIError] named after the
//     exception, with the fix.
//   - A non-zero exit is a code.Result with OK false, not an error.
//   - Stop is idempotent, and a session the service already reaped
//     (ResourceNotFoundException, ValidationException) counts as stopped.
//     After Stop, Execute fails with [ErrStopped] and never opens a fresh
//     session on its own.
//   - Output is cut per stream at Options.MaxOutputChars, and every cut is
//     stated in Result.Truncated with the original length.
//   - Sessions have no staging: a Session does not implement code.Stager,
//     so code.NewTool refuses a call that hands it inputs, by name.
//
// Credentials come from the standard AWS chain (environment, shared config
// and credentials files, SSO, web identity, container and instance roles).
package agentcore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/bedrockagentcore"
	"github.com/aws/aws-sdk-go-v2/service/bedrockagentcore/types"

	"github.com/agentry-dev/agentry/code"
	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/jail"
	"github.com/agentry-dev/agentry/toolsession"
)

const (
	// DefaultID is the runner id reported in events.
	DefaultID = "agentcore"
	// DefaultIdentifier is the AWS-managed code interpreter, present in
	// every region where AgentCore is available.
	DefaultIdentifier = "aws.codeinterpreter.v1"
	// MinSessionTimeout and MaxSessionTimeout bound Options.SessionTimeout,
	// as the service does (60 s to 8 h).
	MinSessionTimeout = 60 * time.Second
	MaxSessionTimeout = 28800 * time.Second
	// DefaultExecTimeout bounds one execute when neither the request nor
	// the options say otherwise.
	DefaultExecTimeout = 2 * time.Minute
	// DefaultMaxOutputChars is where each output stream is cut.
	DefaultMaxOutputChars = 8000
	// NamePrefix starts every remote session name.
	NamePrefix = "agentry-"
)

// Options configure a Runner. The zero value is usable: region and
// credentials then come from the standard AWS chain.
type Options struct {
	// Region overrides the region of the loaded or given configuration
	// (AWS_REGION otherwise).
	Region string
	// Identifier names the code interpreter; DefaultIdentifier when empty.
	Identifier string
	// SessionTimeout is how long the service keeps a session alive, from
	// 60 s to 8 h. Zero leaves it to the service (15 minutes today).
	SessionTimeout time.Duration
	// ExecTimeout bounds one execute when the request gives no timeout;
	// DefaultExecTimeout when zero.
	ExecTimeout time.Duration
	// MaxOutputChars cuts each output stream; DefaultMaxOutputChars when
	// zero.
	MaxOutputChars int
	// Client is a ready client. It excludes Config; Region is ignored.
	Client *bedrockagentcore.Client
	// Config is used instead of loading the default configuration.
	Config *aws.Config
	// ID names the runner in events; DefaultID when empty.
	ID string
	// Ledger is the directory where the runner notes the remote sessions
	// it holds, so that the first Start of a later process can stop those
	// a crash left running (default: agentry-agentcore in the temporary
	// directory). Only sessions noted by processes that no longer exist
	// are stopped, at most MaxSweep per sweep.
	Ledger string
	// MaxSweep bounds one orphan sweep (default DefaultMaxSweep).
	MaxSweep int
	// Events, when set, receives agentry.runner.swept for the orphan
	// sweep. It must not block.
	Events func(event.Event)
}

// Runner opens AgentCore Code Interpreter sessions. It is safe for
// concurrent use.
type Runner struct {
	id          string
	identifier  string
	timeoutSecs *int32
	execTimeout time.Duration
	maxChars    int
	client      *bedrockagentcore.Client
	creds       aws.CredentialsProvider
	ledger      *ledger
	events      func(event.Event)
	swept       sync.Once
}

var _ code.Runner = (*Runner)(nil)

// New builds a Runner. Without Options.Client or Options.Config it loads
// the default AWS configuration; it fails, naming what to set, when no
// region can be found. Credentials are checked on the first Start, so New
// does no network I/O.
func New(ctx context.Context, opt Options) (*Runner, error) {
	if err := ValidateSessionTimeout(opt.SessionTimeout); err != nil {
		return nil, err
	}
	if opt.ExecTimeout < 0 {
		return nil, fmt.Errorf("agentcore: exec timeout %v is negative: use a positive duration, or zero for %v", opt.ExecTimeout, DefaultExecTimeout)
	}
	if opt.MaxOutputChars < 0 {
		return nil, fmt.Errorf("agentcore: max output chars %d is negative: use a positive number, or zero for %d", opt.MaxOutputChars, DefaultMaxOutputChars)
	}
	if opt.Client != nil && opt.Config != nil {
		return nil, errors.New("agentcore: both a client and a config were given: set one of Options.Client and Options.Config")
	}
	r := &Runner{
		id:          cmpOr(opt.ID, DefaultID),
		identifier:  cmpOr(opt.Identifier, DefaultIdentifier),
		execTimeout: opt.ExecTimeout,
		maxChars:    opt.MaxOutputChars,
	}
	if r.execTimeout == 0 {
		r.execTimeout = DefaultExecTimeout
	}
	if opt.MaxSweep < 0 {
		return nil, fmt.Errorf("agentcore: max sweep %d is negative: use a positive number, or zero for %d", opt.MaxSweep, DefaultMaxSweep)
	}
	base := opt.Ledger
	if base == "" {
		base = filepath.Join(os.TempDir(), "agentry-agentcore")
	}
	r.ledger = ledgerAt(base, cmp.Or(opt.MaxSweep, DefaultMaxSweep))
	r.events = opt.Events
	if r.maxChars == 0 {
		r.maxChars = DefaultMaxOutputChars
	}
	if opt.SessionTimeout > 0 {
		secs := int32(opt.SessionTimeout / time.Second)
		r.timeoutSecs = &secs
	}

	if opt.Client != nil {
		o := opt.Client.Options()
		if o.Region == "" {
			return nil, ErrNoRegion
		}
		r.client, r.creds = opt.Client, o.Credentials
		return r, nil
	}
	var cfg aws.Config
	if opt.Config != nil {
		cfg = opt.Config.Copy()
	} else {
		var err error
		cfg, err = config.LoadDefaultConfig(ctx)
		if err != nil {
			return nil, fmt.Errorf("agentcore: load the AWS configuration: %w", err)
		}
	}
	if opt.Region != "" {
		cfg.Region = opt.Region
	}
	if cfg.Region == "" {
		return nil, ErrNoRegion
	}
	if _, cached := cfg.Credentials.(*aws.CredentialsCache); !cached && cfg.Credentials != nil {
		// Start checks credentials before each session; a cache keeps
		// that, and the client's signing, from fetching them every time.
		cfg.Credentials = aws.NewCredentialsCache(cfg.Credentials)
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = awshttp.NewBuildableClient()
	}
	cfg.HTTPClient = ownBody{next: cfg.HTTPClient}
	r.client, r.creds = bedrockagentcore.NewFromConfig(cfg), cfg.Credentials
	return r, nil
}

// ID names the runner in events.
func (r *Runner) ID() string { return r.id }

// Identifier is the code interpreter this runner opens sessions on.
func (r *Runner) Identifier() string { return r.identifier }

// SessionName is the remote name of the session held under key: the
// prefix and the key's digest, never the key.
func SessionName(key string) string { return NamePrefix + toolsession.HashKey(key) }

// Start opens a remote session for req.Key. req.Language is the session's
// default language (Python when empty); an execute may name another.
func (r *Runner) Start(ctx context.Context, req code.StartRequest) (code.Session, error) {
	if req.Key == "" {
		return nil, errors.New("agentcore: start needs an isolation key: derive one with toolsession.Key")
	}
	lang, err := Language(cmpOr(req.Language, "python"))
	if err != nil {
		return nil, err
	}
	if err := r.checkCredentials(ctx); err != nil {
		return nil, err
	}
	r.swept.Do(func() {
		p := r.ledger.sweep(ctx, r.client)
		p.RunnerID = r.id
		if r.events != nil {
			r.events(event.Event{Type: jail.TypeRunnerSwept, Payload: &p, Meta: event.Meta{Time: time.Now()}})
		}
	})
	name := SessionName(req.Key)
	out, err := r.client.StartCodeInterpreterSession(ctx, &bedrockagentcore.StartCodeInterpreterSessionInput{
		CodeInterpreterIdentifier: aws.String(r.identifier),
		Name:                      aws.String(name),
		SessionTimeoutSeconds:     r.timeoutSecs,
	})
	if err != nil {
		return nil, wrapErr(opStart, "", err)
	}
	id := aws.ToString(out.SessionId)
	if id == "" {
		return nil, fmt.Errorf("agentcore: start session %s: the service answered without a session id", name)
	}
	if err := r.ledger.note(r.identifier, id); err != nil {
		// A session nobody could find again after a crash is not opened.
		_, _ = r.client.StopCodeInterpreterSession(context.WithoutCancel(ctx), &bedrockagentcore.StopCodeInterpreterSessionInput{
			CodeInterpreterIdentifier: aws.String(r.identifier), SessionId: aws.String(id),
		})
		return nil, err
	}
	return &Session{
		runner:  r,
		id:      id,
		name:    name,
		lang:    lang,
		stopSem: make(chan struct{}, 1),
	}, nil
}

func (r *Runner) checkCredentials(ctx context.Context) error {
	if r.creds == nil {
		return fmt.Errorf("%w: %s", ErrNoCredentials, credentialsFix)
	}
	if _, err := r.creds.Retrieve(ctx); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("agentcore: resolve AWS credentials: %w", ctx.Err())
		}
		return fmt.Errorf("%w (%v): %s", ErrNoCredentials, err, credentialsFix)
	}
	return nil
}

const credentialsFix = "set AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or run with an IAM role"

// ValidateSessionTimeout accepts zero (the service's default) or a whole
// number of seconds from 60 to 28,800.
func ValidateSessionTimeout(d time.Duration) error {
	switch {
	case d == 0:
		return nil
	case d < MinSessionTimeout || d > MaxSessionTimeout:
		return fmt.Errorf("%w: %v is outside 60s..8h: choose a value in that range, or zero for the service's default", ErrSessionTimeout, d)
	case d%time.Second != 0:
		return fmt.Errorf("%w: %v is not a whole number of seconds: round it to seconds", ErrSessionTimeout, d)
	}
	return nil
}

// Language maps a language name to the one the service knows. It accepts
// python (py, python3), javascript (js) and typescript (ts), in any case.
func Language(name string) (types.ProgrammingLanguage, error) {
	switch strings.ToLower(strings.TrimSpace(name)) {
	case "python", "python3", "py":
		return types.ProgrammingLanguagePython, nil
	case "javascript", "js":
		return types.ProgrammingLanguageJavascript, nil
	case "typescript", "ts":
		return types.ProgrammingLanguageTypescript, nil
	}
	return "", fmt.Errorf("%w: %.40q: use python, javascript or typescript", ErrUnsupportedLanguage, name)
}

func cmpOr(s, fallback string) string {
	if s == "" {
		return fallback
	}
	return s
}
