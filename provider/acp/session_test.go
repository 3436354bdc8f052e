package acp_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/provider/acp"
)

func kinds(outs []provider.Output) []string {
	var k []string
	for _, o := range outs {
		s := string(o.Kind)
		if o.Kind == provider.OutputActivity {
			s += ":" + strings.SplitN(o.Text, ":", 2)[0]
		}
		k = append(k, s)
	}
	return k
}

func TestTurnMapsUpdatesToOutputs(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	s := r.create(r.instance(r.config(nil, nil)), "s1")
	if !strings.HasPrefix(string(s.Binding()), "scripted-") {
		t.Fatalf("binding %q is not the ACP session id", s.Binding())
	}
	outs := turn(t, s, "t1", "hello")
	got := strings.Join(kinds(outs), " ")
	want := "turn.started activity:thinking text text activity:plan activity:tool call call-9 activity:tool call call-9 completed activity:context usage turn.completed"
	if got != want {
		t.Fatalf("outputs:\n%s\nwant\n%s", got, want)
	}
	if said(outs) != "hello back" || last(outs).Outcome != provider.OutcomeCompleted {
		t.Fatalf("said %q, ended %+v", said(outs), last(outs))
	}
	// The prompt response's usage is the turn's, structured.
	for _, o := range outs {
		if o.Kind != provider.OutputUsage {
			continue
		}
		u := o.Usage
		if u.Basis != llm.BasisPerTurn || u.Tokens() != (llm.Usage{InputTokens: 100, OutputTokens: 20}) || u.AgentWall <= 0 {
			t.Errorf("usage %+v", u)
		}
		// The agent names its model only in its model option.
		if _, ok := u.Models["small"]; !ok {
			t.Errorf("usage by model %v: want the model option's current value, small", u.Models)
		}
	}
	for _, want := range []string{"tool call call-9: Look around (read, in_progress)", "tool call call-9 completed", "plan: [completed] greet"} {
		found := false
		for _, o := range outs {
			found = found || o.Text == want
		}
		if !found {
			t.Errorf("no activity %q in %v", want, outs)
		}
	}
}

// A turn's context (the host's note after a takeover) reaches the agent
// as a block of its own, before the person's words, which arrive as they
// were sent.
func TestTurnContextIsABlockOfItsOwn(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	s := r.create(r.instance(r.config(nil, nil)), "s1")
	var outs []provider.Output
	for o, err := range s.RunTurn(context.Background(), provider.TurnRequest{TurnID: "t1", Input: "blocks", Context: "[note: the conversation moved]"}) {
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, o)
	}
	if got := said(outs); got != "[note: the conversation moved] | blocks" {
		t.Fatalf("the prompt's blocks: %q", got)
	}
	if got := said(turn(t, s, "t2", "blocks")); got != "blocks" {
		t.Fatalf("the next turn's blocks: %q", got)
	}
}

func TestStopReasonsAndAgentErrorsEndTheTurn(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	s := r.create(r.instance(r.config(nil, nil)), "s1")
	outs := turn(t, s, "t1", "maxtokens")
	if l := last(outs); l.Outcome != provider.OutcomeFailed || !strings.Contains(outs[len(outs)-2].Text, "token limit") {
		t.Fatalf("max_tokens: %v", outs)
	}
	outs = turn(t, s, "t2", "fail")
	if l := last(outs); l.Outcome != provider.OutcomeFailed || !strings.Contains(outs[len(outs)-2].Text, "JSON-RPC error -32603") {
		t.Fatalf("an agent error: %v", outs)
	}
	if err := s.Err(); err != nil {
		t.Fatalf("a failed turn left the session unusable: %v", err)
	}
	if said(turn(t, s, "t3", "hello")) != "hello back" {
		t.Fatal("the session does not answer after failed turns")
	}
}

// resolve runs "ask" to its request, answers it, and returns what the
// agent said.
func resolve(t *testing.T, s *provider.ValidatedSession, turnID string, approve bool, note string) []provider.Output {
	t.Helper()
	outs := turn(t, s, turnID, "ask")
	req := last(outs)
	if req.Kind != provider.OutputRequest || req.Request.Kind != provider.RequestApproval || req.Request.Tool != "Write notes.txt" {
		t.Fatalf("ask ended at %+v", req)
	}
	if !strings.Contains(req.Request.Prompt, "allow_always (Always allow)") {
		t.Fatalf("the prompt does not list the options: %q", req.Request.Prompt)
	}
	var rest []provider.Output
	for o, err := range s.Resolve(context.Background(), provider.Resolution{TurnID: turnID, RequestID: req.Request.ID, Approve: approve, Note: note}) {
		if err != nil {
			t.Fatal(err)
		}
		rest = append(rest, o)
	}
	if last(rest).Outcome != provider.OutcomeCompleted {
		t.Fatalf("the resolved turn ended %+v", last(rest))
	}
	return rest
}

func TestPermissionOptionsFollowTheResolution(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	s := r.create(r.instance(r.config(nil, nil)), "s1")
	notes := filepath.Join(r.ws, "notes.txt")
	for i, c := range []struct {
		approve bool
		note    string
		chose   string
		writes  bool
	}{
		{false, "", "no", false},
		{false, "always", "no-never", false},
		{true, "", "yes", true},
		{true, "Always", "yes-always", true},
	} {
		os.Remove(notes)
		outs := resolve(t, s, "t"+string(rune('a'+i)), c.approve, c.note)
		if got := said(outs); got != "chose "+c.chose {
			t.Errorf("approve=%v note=%q: the agent says %q, want chose %s", c.approve, c.note, got, c.chose)
		}
		if _, err := os.Stat(notes); (err == nil) != c.writes {
			t.Errorf("approve=%v: notes.txt written = %v", c.approve, err == nil)
		}
	}
	reqs := r.events.of(provider.TypeRequest)
	_ = reqs // the wrapper's own events are not wired to this recorder
	files := r.events.of(acp.TypeFile)
	if len(files) != 2 || files[0].Payload.(*acp.FileEvent).Path != "notes.txt" || files[0].Meta.SessionID != "s1" {
		t.Fatalf("file events %+v", files)
	}
}

func TestInterruptEndsARunningTurn(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	s := r.create(r.instance(r.config(nil, nil)), "s1")
	var outs []provider.Output
	for o, err := range s.RunTurn(context.Background(), provider.TurnRequest{TurnID: "t1", Input: "forever"}) {
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, o)
		if o.Kind == provider.OutputTurnStarted {
			if err := s.Interrupt(context.Background(), "t1"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if l := last(outs); l.Kind != provider.OutputTurnCompleted || l.Outcome != provider.OutcomeInterrupted {
		t.Fatalf("the interrupted turn ended %+v", l)
	}
}

func TestInterruptAnswersAWaitingRequestCancelled(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	s := r.create(r.instance(r.config(nil, nil)), "s1")
	outs := turn(t, s, "t1", "ask")
	if last(outs).Kind != provider.OutputRequest {
		t.Fatalf("ask ended %+v", last(outs))
	}
	if err := s.Interrupt(context.Background(), "t1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(r.ws, "notes.txt")); err == nil {
		t.Fatal("the agent wrote after its permission request was cancelled")
	}
	if got := turn(t, s, "t2", "hello"); said(got) != "hello back" {
		t.Fatalf("the session does not answer after the interrupt: %+v", got)
	}
}

func TestCrashMidTurnQuarantinesTheSession(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	s := r.create(r.instance(r.config(nil, nil)), "s1")
	outs, err := tryTurn(s, "t1", "crash")
	if err == nil {
		t.Fatalf("a crash ended the turn cleanly: %v", outs)
	}
	if !errors.Is(err, acp.ErrAgentExited) {
		t.Fatalf("the turn's error %v does not say the agent exited", err)
	}
	if !provider.HasCode(s.Err(), provider.CodeSessionUnusable) {
		t.Fatalf("after a crash the session says %v; want session_unusable", s.Err())
	}
	if err := s.Close(context.Background(), provider.CloseRequested); err != nil {
		t.Fatalf("closing a crashed session: %v", err)
	}
	// Close waited for the exit, so its report is in.
	stops := r.events.of(acp.TypeAgentStopped)
	var crashed *acp.AgentStopped
	for _, e := range stops {
		if p := e.Payload.(*acp.AgentStopped); e.Meta.SessionID == "s1" && p.Reason == "crashed" {
			crashed = p
		}
	}
	if crashed == nil || crashed.ExitCode == nil || *crashed.ExitCode != 3 {
		for _, e := range stops {
			t.Logf("%s: %+v", e.Meta.SessionID, *e.Payload.(*acp.AgentStopped))
		}
		t.Fatal("no crashed agent_stopped event for s1 with exit code 3")
	}
}

func TestResumeLoadsTheConversation(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"load", "resume"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, nil)
			inst := r.instance(r.config([]string{"ACP_SCRIPTED_RESUME=" + kind}, nil))
			if !inst.Capabilities().Sessions.Resume {
				t.Fatal("resume is not declared")
			}
			s := r.create(inst, "s1")
			turn(t, s, "t1", "hello")
			turn(t, s, "t2", "hello")
			b := s.Binding()
			if err := s.Close(context.Background(), provider.CloseRequested); err != nil {
				t.Fatal(err)
			}
			rs, err := inst.Adapter().Resume(context.Background(), provider.ResumeRequest{SessionID: "s2", WorkingDirectory: r.ws, Binding: b})
			if err != nil {
				t.Fatal(err)
			}
			defer rs.Close(context.Background(), provider.CloseRequested)
			outs := turn(t, rs, "t3", "turns")
			// The replayed history (session/load) is not a turn's output.
			if said(outs) != "turns 3" {
				t.Fatalf("after %s the agent says %q, want turns 3", kind, said(outs))
			}
			// A binding the agent no longer knows (its memory went with
			// its process): the conversation goes on afresh, and says so.
			afresh(t, r, inst, "scripted-unknown", "JSON-RPC error")
		})
	}
}

// afresh resumes binding, which the agent cannot reopen, and checks that
// the conversation goes on in a new agent session under the same binding:
// the first turn tells the person (an activity, saying why) and the agent
// (a note before the person's words), the next one neither; an
// agentry.acp.session_afresh event says why.
func afresh(t *testing.T, r *rig, inst *provider.Instance, binding provider.Binding, why string) {
	t.Helper()
	rs, err := inst.Adapter().Resume(context.Background(), provider.ResumeRequest{SessionID: "s3", WorkingDirectory: r.ws, Binding: binding})
	if err != nil {
		t.Fatalf("resuming a binding the agent cannot reopen: %v", err)
	}
	defer rs.Close(context.Background(), provider.CloseRequested)
	if rs.Binding() != binding {
		t.Fatalf("the session reopened afresh has binding %q, want the conversation's %q", rs.Binding(), binding)
	}
	outs := turn(t, rs, "t1", "blocks")
	note := ""
	for _, o := range outs {
		if o.Kind == provider.OutputActivity && strings.Contains(o.Text, "memory of this conversation is new") {
			note = o.Text
		}
	}
	if !strings.Contains(note, why) || !strings.Contains(note, "transcript is kept") {
		t.Errorf("the person is not told the agent's memory is new, and why (%q): %v", why, outs)
	}
	if got := said(outs); !strings.HasPrefix(got, "[note: this conversation began earlier") || !strings.HasSuffix(got, " | blocks") {
		t.Errorf("the agent is not told: its prompt held %q", got)
	}
	outs = turn(t, rs, "t2", "turns")
	if got := said(outs); got != "turns 2" {
		t.Errorf("the next turn: the agent says %q, want turns 2 (its new session's)", got)
	}
	for _, o := range outs {
		if o.Kind == provider.OutputActivity && strings.Contains(o.Text, "memory") {
			t.Errorf("the next turn says it again: %q", o.Text)
		}
	}
	found := false
	for _, e := range r.events.of(acp.TypeSessionAfresh) {
		found = found || strings.Contains(e.Payload.(*acp.SessionAfresh).Why, why)
	}
	if !found {
		t.Errorf("no session_afresh event saying %q", why)
	}
}

// An agent whose session/load succeeds for a session it does not know,
// then answers "Resource not found" to the next call naming it (as
// claude-agent-acp 0.101 does): the conversation goes on afresh.
func TestResumeOfASessionTheAgentLoadsLazilyGoesOnAfresh(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	inst := r.instance(r.config([]string{"ACP_SCRIPTED_RESUME=lazy"}, func(c *acp.Config) { c.Mode = "plan" }))
	afresh(t, r, inst, "scripted-forgotten", "does not know its session (JSON-RPC error -32002")
}

// An agent that offers neither session/load nor session/resume still
// resumes a conversation: afresh, saying so.
func TestResumeWithoutLoadOrResumeGoesOnAfresh(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	inst := r.instance(r.config([]string{"ACP_SCRIPTED_RESUME=none"}, nil))
	if !inst.Capabilities().Sessions.Resume {
		t.Fatal("resume is not declared")
	}
	s := r.create(inst, "s1")
	turn(t, s, "t1", "hello")
	b := s.Binding()
	if err := s.Close(context.Background(), provider.CloseRequested); err != nil {
		t.Fatal(err)
	}
	afresh(t, r, inst, b, "offers neither session/load nor session/resume")
}

func TestModes(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	inst := r.instance(r.config(nil, func(c *acp.Config) { c.Mode = "plan" }))
	s := r.create(inst, "s1")
	if got := said(turn(t, s, "t1", "mode")); got != "mode plan" {
		t.Fatalf("the definition's mode: the agent says %q", got)
	}
	s2, err := inst.Adapter().Create(context.Background(), provider.CreateRequest{SessionID: "s2", WorkingDirectory: r.ws, Configuration: []byte(`{"mode":"default"}`)})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close(context.Background(), provider.CloseRequested)
	if got := said(turn(t, s2, "t1", "mode")); got != "mode default" {
		t.Fatalf("the session's mode: the agent says %q", got)
	}
	_, err = inst.Adapter().Create(context.Background(), provider.CreateRequest{SessionID: "s3", WorkingDirectory: r.ws, Configuration: []byte(`{"mode":"yolo"}`)})
	if err == nil || !strings.Contains(err.Error(), `no mode "yolo"; it offers default, plan`) {
		t.Fatalf("an unknown mode: %v", err)
	}
	_, err = inst.Adapter().Create(context.Background(), provider.CreateRequest{SessionID: "s4", WorkingDirectory: r.ws, Configuration: []byte(`{"mood":"x"}`)})
	if err == nil {
		t.Fatal("a misspelt session configuration was accepted")
	}
}

func TestWorkingDirectoryMustBeUnderTheRoot(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	inst := r.instance(r.config(nil, nil))
	outside := t.TempDir()
	_, err := inst.Adapter().Create(context.Background(), provider.CreateRequest{SessionID: "s1", WorkingDirectory: outside})
	if !errors.Is(err, acp.ErrOutsideWorkspaceRoot) {
		t.Fatalf("a working directory outside the root: %v", err)
	}
	link := filepath.Join(r.root, "link")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	_, err = inst.Adapter().Create(context.Background(), provider.CreateRequest{SessionID: "s2", WorkingDirectory: link})
	if !errors.Is(err, acp.ErrOutsideWorkspaceRoot) {
		t.Fatalf("a symbolic link out of the root: %v", err)
	}
	if n := len(r.events.of(acp.TypeAgentStarted)); n != 1 {
		t.Fatalf("%d agents started; only the probe should have", n)
	}
}

func TestReadiness(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	for _, c := range []struct {
		name string
		cfg  func(*acp.Config)
		want provider.Readiness
	}{
		{"ready", nil, provider.Ready},
		{"missing executable", func(c *acp.Config) { c.Command = []string{"/nonexistent/agent"} }, provider.MissingExecutable},
		{"missing credentials", func(c *acp.Config) { c.Env = append(c.Env, "ACP_SCRIPTED_AUTH=env") }, provider.MissingCredentials},
		{"wrong credentials", func(c *acp.Config) { c.Env = append(c.Env, "ACP_SCRIPTED_AUTH=env", "SCRIPTED_KEY=wrong") }, provider.MissingCredentials},
		{"credentials", func(c *acp.Config) { c.Env = append(c.Env, "ACP_SCRIPTED_AUTH=env", "SCRIPTED_KEY=right") }, provider.Ready},
		{"unsupported version", func(c *acp.Config) { c.Env = append(c.Env, "ACP_SCRIPTED_VERSION=2") }, provider.UnsupportedVersion},
		{"unavailable", func(c *acp.Config) { c.Command = []string{"/bin/true"} }, provider.Unavailable},
	} {
		t.Run(c.name, func(t *testing.T) {
			inst := r.instance(r.config(nil, c.cfg))
			got, err := inst.Readiness(context.Background())
			if err != nil || got != c.want {
				t.Fatalf("readiness %s, %v; want %s", got, err, c.want)
			}
			if got == provider.Ready {
				return
			}
			_, err = inst.Adapter().Create(context.Background(), provider.CreateRequest{SessionID: "s1", WorkingDirectory: r.ws})
			if !errors.Is(err, acp.ErrNotReady) || !strings.Contains(err.Error(), string(c.want)) {
				t.Fatalf("create on an instance that is %s: %v", c.want, err)
			}
		})
	}
}

func TestCredentialsComeFromTheHostEnvByName(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	d, err := acp.NewDriver(acp.Options{Launcher: acp.Unjailed(acp.UnjailedOptions{HomeDir: t.TempDir()}),
		LookupEnv: func(name string) (string, bool) {
			if name == "SCRIPTED_KEY" {
				return "right", true
			}
			return "", false
		}})
	if err != nil {
		t.Fatal(err)
	}
	r.driver = d
	inst := r.instance(r.config([]string{"ACP_SCRIPTED_AUTH=env", "SCRIPTED_KEY", "NOT_ON_THIS_HOST"}, nil))
	if got, _ := inst.Readiness(context.Background()); got != provider.Ready {
		t.Fatalf("readiness %s with the key copied from the host", got)
	}
}

func TestNoLauncherNoDriver(t *testing.T) {
	t.Parallel()
	_, err := acp.NewDriver(acp.Options{})
	if err == nil || !strings.Contains(err.Error(), "acp.Unjailed") {
		t.Fatalf("a driver without a launcher: %v", err)
	}
}

func TestDisposeStopsEveryAgent(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	reg, err := provider.OpenRegistry(context.Background(), []provider.Driver{r.driver},
		[]provider.Definition{{ID: "agent", Provider: acp.DefaultKey, Config: r.config(nil, nil)}})
	if err != nil {
		t.Fatal(err)
	}
	inst, _ := reg.Instance("agent")
	for _, id := range []string{"s1", "s2"} {
		if _, err := inst.Adapter().Create(context.Background(), provider.CreateRequest{SessionID: id, WorkingDirectory: r.ws}); err != nil {
			t.Fatal(err)
		}
	}
	if err := reg.Dispose(context.Background()); err != nil {
		t.Fatal(err)
	}
	started, stopped := map[string]int{}, map[string]bool{}
	for _, e := range r.events.of(acp.TypeAgentStarted) {
		started[e.Meta.SessionID] = e.Payload.(*acp.AgentStarted).Pid
	}
	for _, e := range r.events.of(acp.TypeAgentStopped) {
		p := e.Payload.(*acp.AgentStopped)
		stopped[e.Meta.SessionID] = p.Reason == "stopped"
	}
	for _, id := range []string{"s1", "s2"} {
		if started[id] == 0 || !stopped[id] {
			t.Errorf("session %s: started pid %d, stopped %v", id, started[id], stopped[id])
		}
	}
}
