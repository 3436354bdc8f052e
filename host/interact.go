package host

import (
	"context"
	"errors"
	"net/http"
	"sort"
	"time"

	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/tool"
)

// InteractionView is a session interaction waiting for the person, as
// GET /v1/sessions/{id} and the SSE stream show it. Answer a question
// with POST /v1/sessions/{id}/decision and {"interaction": id, "answer":
// "…"} (or "approve": false to decline). A notice needs no answer.
type InteractionView struct {
	ID      string    `json:"id"`
	Kind    string    `json:"kind"`
	Message string    `json:"message"`
	Options []string  `json:"options,omitempty"`
	Since   time.Time `json:"since"`
}

// asking is a question the provider raised, and where its answer goes.
type asking struct {
	view  InteractionView
	reply chan provider.InteractionReply // buffered (1): the answer, once
}

// interactions is the host's side of session interactions
// (provider.Interactions), handed to every session opening: a question
// waits in the conversation until the person answers it through the
// decision endpoint, or the provider gives up, or the conversation
// closes; a notice is shown on the stream and acknowledged at once.
type interactions struct{ h *Host }

var errNotLive = errors.New("host: the conversation is not held by this host now; the interaction cannot reach its person")

func (hi interactions) Interact(ctx context.Context, sessionID string, in provider.Interaction) (provider.InteractionReply, error) {
	h := hi.h
	v := InteractionView{ID: in.ID, Kind: string(in.Kind), Message: in.Message, Options: in.Options, Since: h.now().UTC()}
	h.mu.Lock()
	lc := h.live[sessionID]
	if lc == nil {
		h.mu.Unlock()
		return provider.InteractionReply{}, errNotLive
	}
	var a *asking
	if in.Kind == provider.InteractionQuestion {
		a = &asking{view: v, reply: make(chan provider.InteractionReply, 1)}
		if lc.asking == nil {
			lc.asking = map[string]*asking{}
		}
		lc.asking[in.ID] = a
	}
	owner := lc.owner
	h.mu.Unlock()
	h.router.tell(sessionID, &v)
	if a == nil {
		return provider.InteractionReply{}, nil // a notice: shown, acknowledged
	}
	h.tellInteractions(owner, sessionID)
	select {
	case r := <-a.reply:
		return r, nil
	case <-ctx.Done():
		h.mu.Lock()
		if lc.asking[in.ID] == a {
			delete(lc.asking, in.ID)
		}
		h.mu.Unlock()
		h.tellInteractions(owner, sessionID)
		return provider.InteractionReply{}, context.Cause(ctx)
	}
}

// askingViews returns the questions the conversation waits on, oldest
// first.
func (h *Host) askingViews(id string) []InteractionView {
	h.mu.Lock()
	defer h.mu.Unlock()
	lc := h.live[id]
	if lc == nil || len(lc.asking) == 0 {
		return nil
	}
	out := make([]InteractionView, 0, len(lc.asking))
	for _, a := range lc.asking {
		out = append(out, a.view)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Since.Equal(out[j].Since) {
			return out[i].Since.Before(out[j].Since)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// dropAsking declines every question the conversation waits on (it is
// closing: nobody will answer them now).
func (h *Host) dropAsking(lc *liveConv) {
	h.mu.Lock()
	qs := lc.asking
	lc.asking = nil
	h.mu.Unlock()
	if len(qs) > 0 {
		h.tellInteractions(lc.owner, lc.id)
	}
	for _, a := range qs {
		select {
		case a.reply <- provider.InteractionReply{Declined: true}:
		default:
		}
	}
}

// answerInteraction hands the person's answer to the question waiting on
// the conversation. It does not take the conversation: a question may be
// answered while a turn runs.
func (h *Host) answerInteraction(w http.ResponseWriter, r *http.Request, o tool.Identity, dec DecisionRequest) {
	id := r.PathValue("id")
	none := newError(http.StatusConflict, CodeNoPendingInteraction, "host: this session waits for no interaction with that id")
	h.mu.Lock()
	lc := h.live[id]
	if lc == nil || lc.owner != o {
		h.mu.Unlock()
		switch {
		case lc != nil: // live here, and someone else's
			writeError(w, notFound())
		default:
			// Not live here: it does not exist for this caller, or it
			// waits on nothing. The store says which, so others get 404.
			if _, ok := h.callersConversation(w, r, o); ok {
				writeError(w, none)
			}
		}
		return
	}
	a := lc.asking[dec.Interaction]
	if a == nil {
		h.mu.Unlock()
		writeError(w, none)
		return
	}
	reply := provider.InteractionReply{Answer: dec.Answer, Declined: !dec.Approve}
	if reply.Declined {
		reply.Answer = ""
	}
	if err := provider.CheckInteractionReply(provider.Interaction{ID: a.view.ID, Kind: provider.InteractionKind(a.view.Kind),
		Message: a.view.Message, Options: a.view.Options}, reply); err != nil {
		h.mu.Unlock()
		writeError(w, fieldError(CodeInvalidField, "answer", "host: the answer does not fit the interaction: "+err.Error()))
		return
	}
	delete(lc.asking, dec.Interaction)
	h.mu.Unlock()
	a.reply <- reply
	h.tellInteractions(o, id)
	writeJSON(w, http.StatusOK, map[string]any{"interaction": a.view.ID, "answered": true})
}
