package host

import (
	"net/http"
	"time"

	"github.com/agentry-dev/agentry/tool"
)

// InteractionView is a session interaction waiting for the person, as
// GET /v1/sessions/{id} and the SSE stream show it. Answer it with POST
// /v1/sessions/{id}/decision and {"interaction": id, "answer": "…"} (or
// "approve": false to decline).
type InteractionView struct {
	ID      string    `json:"id"`
	Kind    string    `json:"kind"`
	Message string    `json:"message"`
	Options []string  `json:"options,omitempty"`
	Since   time.Time `json:"since"`
}

// asking is an interaction the provider raised, and where its answer goes.
type asking struct {
	view  InteractionView
	reply chan interactionReply // buffered (1): the answer, once
}

type interactionReply struct {
	answer   string
	declined bool
}

// askingView returns the interaction the conversation waits on, if any.
func (h *Host) askingView(id string) *InteractionView {
	h.mu.Lock()
	defer h.mu.Unlock()
	if lc := h.live[id]; lc != nil && lc.asking != nil {
		v := lc.asking.view
		return &v
	}
	return nil
}

// dropAsking gives up an interaction nobody will answer now (the
// conversation is closing): the provider hears it was declined.
func (h *Host) dropAsking(lc *liveConv) {
	h.mu.Lock()
	a := lc.asking
	lc.asking = nil
	h.mu.Unlock()
	if a != nil {
		select {
		case a.reply <- interactionReply{declined: true}:
		default:
		}
	}
}

// answerInteraction hands the person's answer to the interaction waiting
// on the conversation. It does not take the conversation: an interaction
// may be answered while a turn runs.
func (h *Host) answerInteraction(w http.ResponseWriter, r *http.Request, o tool.Identity, dec DecisionRequest) {
	id := r.PathValue("id")
	if !validSessionID(id) {
		writeError(w, notFound())
		return
	}
	h.mu.Lock()
	lc := h.live[id]
	if lc == nil || lc.owner != o {
		h.mu.Unlock()
		// Not live here: it either does not exist for this caller, or it
		// waits on nothing. Ask the store which, so others still get 404.
		if _, err := h.store.Info(r.Context(), o, id); err != nil {
			writeError(w, h.storeError(err))
			return
		}
		writeError(w, newError(http.StatusConflict, CodeNoPendingInteraction, "host: this session waits for no interaction with that id"))
		return
	}
	a := lc.asking
	if a == nil || a.view.ID != dec.Interaction {
		h.mu.Unlock()
		writeError(w, newError(http.StatusConflict, CodeNoPendingInteraction, "host: this session waits for no interaction with that id"))
		return
	}
	if len(a.view.Options) > 0 && dec.Approve && !contains(a.view.Options, dec.Answer) {
		h.mu.Unlock()
		writeError(w, fieldError(CodeInvalidField, "answer", "host: \"answer\" must be one of the interaction's options"))
		return
	}
	lc.asking = nil
	h.mu.Unlock()
	a.reply <- interactionReply{answer: dec.Answer, declined: !dec.Approve}
	writeJSON(w, http.StatusOK, map[string]any{"interaction": a.view.ID, "answered": true})
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
