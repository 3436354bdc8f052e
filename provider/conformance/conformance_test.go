package conformance

import (
	"slices"
	"testing"
	"testing/synctest"

	"go.uber.org/goleak"

	"github.com/agentry-dev/agentry/provider"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The fake keeps every rule.
func TestFakePasses(t *testing.T) {
	Run(t, NewFakeDriver(), FakeFixture())
}

func TestFakePassesEvaluate(t *testing.T) {
	t.Parallel()
	rep := Evaluate(t.Context(), NewFakeDriver(), FakeFixture())
	if f := rep.Failed(); len(f) != 0 {
		t.Fatalf("failed: %v\n%+v", f, rep)
	}
	for _, res := range rep.Results {
		if res.Status != Passed {
			t.Errorf("%s: %s %v", res.Check, res.Status, res.Messages)
		}
	}
	if len(rep.Results) != len(Checks()) {
		t.Fatalf("%d results for %d checks", len(rep.Results), len(Checks()))
	}
}

// Each flaw breaks one rule; the kit must fail exactly that check (the
// checks that depend on it are skipped, never failed).
func TestEachFlawFailsExactlyItsCheck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		flaw  flaw
		check string
	}{
		{flawReadiness, CheckMaterialize},
		{flawNoCallback, CheckCreate},
		{flawTurnIDs, CheckTurn},
		{flawResolveRestarts, CheckResolve},
		{flawIgnoresInterrupt, CheckInterrupt},
		{flawSteerFails, CheckSteer},
		{flawCloseFails, CheckClose},
		{flawResumeElsewhere, CheckResume},
		{flawForgetsPending, CheckResumeWait},
		{flawBranchReuses, CheckBranch},
		{flawRefusesHostTools, CheckHostClaim},
		{flawNeverCallsTools, CheckHostInvoke},
		{flawBreaksOnRefusal, CheckHostCap},
		{flawToolsOnClose, CheckHostRelease},
		{flawNeverInteracts, CheckInteract},
		{flawDisposeFails, CheckDispose},
	} {
		t.Run(tc.check, func(t *testing.T) {
			t.Parallel()
			// A flaw may make the kit wait out its timeout (an interrupt
			// that is ignored); in a bubble that takes no real time.
			synctest.Test(t, func(t *testing.T) {
				rep := Evaluate(t.Context(), &FakeDriver{flaw: tc.flaw}, FakeFixture())
				if got := rep.Failed(); !slices.Equal(got, []string{tc.check}) {
					t.Fatalf("failed checks %v; want exactly [%s]\n%+v", got, tc.check, rep.Results)
				}
				res, _ := rep.Result(tc.check)
				if len(res.Messages) == 0 {
					t.Fatal("the failing check says nothing")
				}
				t.Logf("%s: %v", tc.check, res.Messages)
			})
		})
	}
}

func TestEveryCheckHasAFlaw(t *testing.T) {
	t.Parallel()
	// The table above names every check; keep it so when checks change.
	want := Checks()
	covered := []string{CheckMaterialize, CheckCreate, CheckTurn, CheckResolve, CheckInterrupt, CheckSteer, CheckClose,
		CheckResume, CheckResumeWait, CheckBranch, CheckHostClaim, CheckHostInvoke, CheckHostCap, CheckHostRelease, CheckInteract, CheckDispose}
	if !slices.Equal(want, covered) {
		t.Fatalf("checks %v; the flaw table covers %v", want, covered)
	}
}

func TestUndeclaredAndMissingFixture(t *testing.T) {
	t.Parallel()
	// Without a prompt for a declared capability, its check fails: a
	// declaration is never left untested.
	f := FakeFixture()
	f.SteerPrompt = ""
	rep := Evaluate(t.Context(), NewFakeDriver(), f)
	if got := rep.Failed(); !slices.Equal(got, []string{CheckSteer}) {
		t.Fatalf("failed %v", got)
	}
	// A nil driver fails the first check and skips the rest.
	rep = Evaluate(t.Context(), nil, FakeFixture())
	if got := rep.Failed(); !slices.Equal(got, []string{CheckMaterialize}) {
		t.Fatalf("failed %v", got)
	}
	res, _ := rep.Result(CheckDispose)
	if res.Status != Skipped {
		t.Fatalf("dispose %s", res.Status)
	}
}

// A provider that declares less is checked for less.
func TestUndeclaredChecksAreSkipped(t *testing.T) {
	t.Parallel()
	d := minimalDriver{NewFakeDriver()}
	rep := Evaluate(t.Context(), d, Fixture{Prompt: "hello"})
	if got := rep.Failed(); len(got) != 0 {
		t.Fatalf("failed %v: %+v", got, rep.Results)
	}
	for _, name := range []string{CheckResolve, CheckInterrupt, CheckSteer, CheckResume, CheckResumeWait, CheckBranch, CheckHostClaim, CheckHostInvoke, CheckHostCap, CheckHostRelease, CheckInteract} {
		if res, _ := rep.Result(name); res.Status != Skipped {
			t.Errorf("%s: %s", name, res.Status)
		}
	}
}

// A host's test makes the fake ask a person something outside any turn.
func TestFakeDriverInteract(t *testing.T) {
	t.Parallel()
	d := NewFakeDriver()
	reg, err := provider.OpenRegistry(t.Context(), []provider.Driver{d}, []provider.Definition{{ID: "f", Provider: FakeKey}})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Dispose(t.Context())
	inst, _ := reg.Instance("f")
	p := &kitPerson{}
	s, err := inst.Adapter().Create(t.Context(), provider.CreateRequest{SessionID: "s1", WorkingDirectory: "/", Interactions: p})
	if err != nil {
		t.Fatal(err)
	}
	q := provider.Interaction{ID: "q1", Kind: provider.InteractionQuestion, Message: FakeQuestion, Options: []string{FakeNo, FakeYes}}
	r, err := d.Interact(t.Context(), "s1", q)
	if err != nil || r.Answer != FakeNo {
		t.Fatalf("interact: %+v %v", r, err)
	}
	if _, err := d.Interact(t.Context(), "s2", q); err == nil {
		t.Fatal("interacted through a session that is not open")
	}
	if err := s.Close(t.Context(), provider.CloseRequested); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Interact(t.Context(), "s1", q); err == nil {
		t.Fatal("interacted through a closed session")
	}
}
