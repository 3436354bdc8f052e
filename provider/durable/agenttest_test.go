package durable_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/agentry-dev/agentry/agent"
	"github.com/agentry-dev/agentry/agent/agenttest"
	"github.com/agentry-dev/agentry/internal/temporaltest"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/durable"
	"github.com/agentry-dev/agentry/provider/native"
)

// The durable executor keeps the loop's promises, on a real Temporal
// server: each check gets a replica of its own and one conversation.
func TestAgentTest(t *testing.T) {
	c := dial(t, temporaltest.Addr(t))
	agenttest.Run(t, func(t *testing.T, s agenttest.Setup) agenttest.Agent {
		store := native.NewMemoryStore(0)
		r := openReplica(t, c, durable.Config{TaskQueue: uniq(t), Replica: "r1", Model: s.Model, Tools: s.Tools,
			Store: store, MaxIterations: s.MaxIterations, Events: s.Events})
		sess, err := r.inst.Adapter().Create(context.Background(), provider.CreateRequest{SessionID: "s1", WorkingDirectory: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := sess.Close(context.Background(), provider.CloseRequested); err != nil {
				t.Errorf("closing the session: %v", err)
			}
		})
		return &onTemporal{c: c, s: sess, store: store}
	})
}

// onTemporal runs agenttest's turns as durable turns of one session,
// through the provider contract, and reads each finished turn's result
// (its answer, its usage) from the workflow.
type onTemporal struct {
	c     client.Client
	s     provider.Session
	store native.Store
	turns int
}

// waiting is what resumes a paused durable turn.
type waiting struct{ turnID, requestID string }

func (o *onTemporal) Run(ctx context.Context, message string) agenttest.Turn {
	o.turns++
	turnID := fmt.Sprintf("t%d", o.turns)
	return o.follow(ctx, turnID, o.s.RunTurn(ctx, provider.TurnRequest{TurnID: turnID, Input: message}))
}

func (o *onTemporal) Resume(ctx context.Context, paused agenttest.Turn, d agent.Decision) agenttest.Turn {
	w := paused.Resume.(waiting)
	return o.follow(ctx, w.turnID, o.s.Resolve(ctx, provider.Resolution{TurnID: w.turnID, RequestID: w.requestID, Approve: d.Approve, Note: d.Note}))
}

func (o *onTemporal) follow(ctx context.Context, turnID string, seq func(func(provider.Output, error) bool)) agenttest.Turn {
	var last provider.Output
	var err error
	for out, e := range seq {
		if e != nil {
			err = e
			break
		}
		last = out
	}
	turn := agenttest.Turn{RunID: turnID}
	if r := last.Request; r != nil && err == nil {
		turn.Pause = &agenttest.Pause{Question: r.Prompt, Tool: r.Tool}
		turn.Resume = waiting{turnID: turnID, requestID: r.ID}
		return turn
	}
	// The turn ended (or its caller went away, and the turn was
	// interrupted): its workflow's result says how.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	var res durable.TurnResult
	if gerr := o.c.GetWorkflow(wctx, "agentry/"+string(o.s.Binding())+"/"+turnID, "").Get(wctx, &res); gerr != nil {
		turn.Err = errors.Join(err, gerr)
		return turn
	}
	turn.Usage = res.Usage
	if res.Outcome != "completed" {
		turn.Err = fmt.Errorf("the turn ended %s: %s", res.Outcome, res.Problem)
		return turn
	}
	turn.Output = res.Answer
	rec, lerr := o.store.Load(wctx, o.s.Binding())
	if lerr != nil {
		turn.Err = lerr
		return turn
	}
	turn.Messages = rec.Conversation.Messages
	return turn
}
