package provider

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/agentry-dev/agentry/event"
)

// Session interaction limits.
const (
	// MaxInteractionMessageBytes bounds what the person reads.
	MaxInteractionMessageBytes = 8 << 10
	// MaxInteractionOptions bounds a question's choices.
	MaxInteractionOptions = 16
	// MaxInteractionOptionBytes bounds one choice.
	MaxInteractionOptionBytes = 256
	// MaxInteractionAnswerBytes bounds the person's answer.
	MaxInteractionAnswerBytes = 8 << 10
	// MaxInteractionsInFlight bounds the interactions one session waits
	// on at once.
	MaxInteractionsInFlight = 8
)

// InteractionKind names what an interaction wants of the host.
type InteractionKind string

const (
	// InteractionQuestion wants the person's answer.
	InteractionQuestion InteractionKind = "question"
	// InteractionNotice informs the person; the host acknowledges it at
	// once.
	InteractionNotice InteractionKind = "notice"
)

// Interaction is something a provider asks or tells the host during a
// session, outside a turn's request flow (a turn's requests are
// [Request]s, answered by Resolve).
type Interaction struct {
	// ID is an opaque id, unique for the life of the session.
	ID   string
	Kind InteractionKind
	// Message is what the person reads: 1 to 8 KiB of UTF-8, lines and
	// tabs allowed, no other control characters.
	Message string
	// Options are a question's choices, if it offers any (at most 16,
	// each 1 to 256 bytes, distinct). A notice has none.
	Options []string
}

// InteractionReply is the host's answer to an interaction. A notice's
// reply is empty.
type InteractionReply struct {
	// Answer is the person's answer: one of Options when the question
	// offered some. Empty when declined.
	Answer string
	// Declined is true when the person declined to answer.
	Declined bool
}

// Interactions is implemented by the host and supplied at a session's
// opening (CreateRequest.Interactions and the same field of Resume and
// Branch). The wrapper hands the provider a facade of its own, never the
// host's implementation, and calls the host only with interactions it
// has checked. Interact may block until the person answers; its ctx is
// cancelled when the provider gives up or the session closes.
type Interactions interface {
	Interact(ctx context.Context, sessionID string, in Interaction) (InteractionReply, error)
}

// InteractionSupport says which interaction kinds a provider's sessions
// use. Empty: the provider does not interact, and a host's Interactions
// are not handed to it.
type InteractionSupport struct {
	Kinds []InteractionKind `json:"kinds,omitempty"`
}

func (s InteractionSupport) supports(k InteractionKind) bool { return slices.Contains(s.Kinds, k) }

// CheckInteraction reports whether in is a well-formed interaction. It
// does not check the kind against a provider's capabilities, nor the id
// against the ones a session used. The error describes the problem
// without quoting the text.
func CheckInteraction(in Interaction) error {
	if err := CheckID(in.ID); err != nil {
		return fmt.Errorf("the interaction id is malformed: %w", err)
	}
	switch in.Kind {
	case InteractionQuestion, InteractionNotice:
	default:
		return errors.New("the interaction kind is not question or notice")
	}
	if err := checkMessage(in.Message); err != nil {
		return err
	}
	if len(in.Options) > 0 && in.Kind != InteractionQuestion {
		return errors.New("only a question offers options")
	}
	if len(in.Options) > MaxInteractionOptions {
		return fmt.Errorf("the question offers %d options; the limit is %d", len(in.Options), MaxInteractionOptions)
	}
	for i, o := range in.Options {
		if o == "" || len(o) > MaxInteractionOptionBytes {
			return fmt.Errorf("option %d must be 1 to %d bytes", i, MaxInteractionOptionBytes)
		}
		if err := CheckID(o); err != nil {
			return fmt.Errorf("option %d is unusable: %w", i, err)
		}
		if slices.Contains(in.Options[:i], o) {
			return fmt.Errorf("option %d repeats an earlier one", i)
		}
	}
	return nil
}

// checkMessage: non-empty, bounded UTF-8 whose only control characters
// are newlines and tabs, and no bidirectional overrides, which make text
// display as other text.
func checkMessage(m string) error {
	switch {
	case m == "":
		return errors.New("the interaction message is empty")
	case len(m) > MaxInteractionMessageBytes:
		return fmt.Errorf("the interaction message is %d bytes; the limit is %d", len(m), MaxInteractionMessageBytes)
	case !utf8.ValidString(m):
		return errors.New("the interaction message is not valid UTF-8")
	}
	for i, r := range m {
		switch {
		case r == '\n' || r == '\t':
		case r < 0x20 || r >= 0x7f && r < 0xa0:
			return fmt.Errorf("the interaction message has a control character at byte %d", i)
		case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
			return fmt.Errorf("the interaction message has a bidirectional override at byte %d", i)
		}
	}
	return nil
}

// CheckInteractionReply reports whether r is a reply the host may give
// to in: a notice's is ignored; a question's answer is bounded UTF-8 and,
// when the question offered options, one of them, unless declined.
func CheckInteractionReply(in Interaction, r InteractionReply) error {
	if in.Kind != InteractionQuestion || r.Declined {
		return nil
	}
	switch {
	case len(r.Answer) > MaxInteractionAnswerBytes:
		return fmt.Errorf("the answer is %d bytes; the limit is %d", len(r.Answer), MaxInteractionAnswerBytes)
	case !utf8.ValidString(r.Answer):
		return errors.New("the answer is not valid UTF-8")
	case len(in.Options) > 0 && !slices.Contains(in.Options, r.Answer):
		return errors.New("the answer is not among the question's options")
	}
	return nil
}

// interactionOwner is the wrapper's side of one session's interactions:
// it checks what the provider sends, calls the host, and ends them all
// when the session closes or its opening is rejected.
type interactionOwner struct {
	v         *Validated
	sessionID string
	host      Interactions

	life context.Context
	stop context.CancelCauseFunc

	mu       sync.Mutex
	ended    bool
	used     idSet
	inflight int
}

var errInteractionsEnded = errors.New("the session's interactions have ended")

// interactionsFor returns the owner of an opening's interactions, or nil
// when the host supplied none or the provider declares none (then the
// provider is handed nothing).
func (v *Validated) interactionsFor(sessionID string, host Interactions) *interactionOwner {
	if isNil(host) || len(v.caps.Interactions.Kinds) == 0 {
		return nil
	}
	if f, ok := host.(interactionFacade); ok {
		// A facade passed back in (a provider opening a session through
		// the wrapper): wrap the host behind it, not the facade.
		host = f.o.host
	}
	life, stop := context.WithCancelCause(context.Background())
	return &interactionOwner{v: v, sessionID: sessionID, host: host, life: life, stop: stop}
}

// facade is what the provider gets.
func (o *interactionOwner) facade() Interactions {
	if o == nil {
		return nil
	}
	return interactionFacade{o}
}

// end refuses every later interaction and cancels those in flight.
func (o *interactionOwner) end() {
	if o == nil {
		return
	}
	o.mu.Lock()
	o.ended = true
	o.mu.Unlock()
	o.stop(errInteractionsEnded)
}

type interactionFacade struct{ o *interactionOwner }

func (f interactionFacade) Interact(ctx context.Context, sessionID string, in Interaction) (InteractionReply, error) {
	o := f.o
	key := o.v.caps.ProviderKey
	refuse := func(code Code, cause error, format string, args ...any) (InteractionReply, error) {
		return InteractionReply{}, &ContractError{Provider: key, Code: code, Message: fmt.Sprintf(format, args...), Err: cause}
	}
	if sessionID != o.sessionID {
		return refuse(CodeInvalidSessionInteraction, nil, "the interaction names another session")
	}
	if err := CheckInteraction(in); err != nil {
		return refuse(CodeInvalidSessionInteraction, err, "the interaction is malformed")
	}
	if !o.v.caps.Interactions.supports(in.Kind) {
		return refuse(CodeSessionInteractionsUnsupported, nil, "the provider does not declare %s interactions", in.Kind)
	}
	if err := ctx.Err(); err != nil {
		return InteractionReply{}, context.Cause(ctx)
	}
	o.mu.Lock()
	switch {
	case o.ended:
		o.mu.Unlock()
		return refuse(CodeInvalidSessionInteraction, errInteractionsEnded, "the session is closed, or its opening failed")
	case o.used.has(in.ID):
		o.mu.Unlock()
		return refuse(CodeInvalidSessionInteraction, nil, "the interaction id was used before in this session")
	case o.inflight >= MaxInteractionsInFlight:
		o.mu.Unlock()
		return refuse(CodeInvalidSessionInteraction, nil, "%d interactions are in flight; wait for one to be answered", MaxInteractionsInFlight)
	}
	o.used.add(in.ID)
	o.inflight++
	o.mu.Unlock()
	defer func() {
		o.mu.Lock()
		o.inflight--
		o.mu.Unlock()
	}()

	ictx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	unhook := context.AfterFunc(o.life, func() { cancel(context.Cause(o.life)) })
	defer unhook()

	call := Interaction{ID: in.ID, Kind: in.Kind, Message: in.Message, Options: slices.Clone(in.Options)}
	o.emit(TypeInteraction, call, "", 0)
	start := time.Now()
	var reply InteractionReply
	err := safely("the host's Interact", func() error {
		var err error
		reply, err = o.host.Interact(ictx, o.sessionID, call)
		return err
	})
	took := time.Since(start)
	if err != nil {
		o.emit(TypeInteractionEnd, call, "failed", took)
		if ictx.Err() != nil && context.Cause(ictx) == errInteractionsEnded {
			return refuse(CodeInvalidSessionInteraction, errInteractionsEnded, "the session closed while the interaction waited")
		}
		return InteractionReply{}, err
	}
	if in.Kind == InteractionNotice {
		o.emit(TypeInteractionEnd, call, "acknowledged", took)
		return InteractionReply{}, nil
	}
	if reply.Declined {
		o.emit(TypeInteractionEnd, call, "declined", took)
		return InteractionReply{Declined: true}, nil
	}
	if err := CheckInteractionReply(call, reply); err != nil {
		o.emit(TypeInteractionEnd, call, "failed", took)
		return refuse(CodeInvalidSessionInteraction, err, "the host's reply is unusable")
	}
	o.emit(TypeInteractionEnd, call, "answered", took)
	return InteractionReply{Answer: reply.Answer}, nil
}

func (o *interactionOwner) emit(typ event.Type, in Interaction, outcome string, took time.Duration) {
	if !o.v.emitting() {
		return
	}
	p := &InteractionEvent{Provider: o.v.caps.ProviderKey, InteractionID: in.ID, Kind: string(in.Kind),
		MessageBytes: len(in.Message), Options: len(in.Options), Outcome: outcome}
	if outcome != "" {
		p.DurationMs = event.Ms(took)
	}
	o.v.emit(o.sessionID, typ, p)
}
