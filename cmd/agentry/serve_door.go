package main

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/agentry-dev/agentry/host"
)

// doorFlags are serve's bounds on what one principal may ask of the host:
// how slowly a body may arrive, how many requests it may have in flight,
// how fast it may open conversations, and how long closed ones are kept.
type doorFlags struct {
	bodyMinRate         int64
	bodyRateWindow      time.Duration
	maxRequests         int
	maxNewConversations int
	retainClosed        time.Duration
}

func (d *doorFlags) add(f *pflag.FlagSet) {
	f.Int64Var(&d.bodyMinRate, "body-min-rate", host.DefaultBodyMinRate, "the slowest a request body may arrive, in bytes a second over each --body-rate-window; a slower one is cut (408 body_too_slow), however large it is (-1: no floor)")
	f.DurationVar(&d.bodyRateWindow, "body-rate-window", host.DefaultBodyRateWindow, "the window --body-min-rate is judged over")
	f.IntVar(&d.maxRequests, "max-requests-per-principal", host.DefaultMaxRequestsPerPrincipal, "requests one principal may have in flight at once; past it 429 too_many_requests (-1: no bound)")
	f.IntVar(&d.maxNewConversations, "max-new-conversations-per-minute", host.DefaultMaxCreatesPerMinute, "conversations one principal may open a minute (a burst of that many, then that rate); past it 429 rate_limited with Retry-After (-1: no bound)")
	f.DurationVar(&d.retainClosed, "retain-closed", host.DefaultRetainClosed, "how long a closed conversation is kept before the hourly sweep removes it with its transcript, turn log and the standing rules scoped to it (rules that hold everywhere and usage records stay: they are what was billed); a negative duration keeps them forever")
}

// apply sets the host's options from the flags.
func (d doorFlags) apply(o *host.Options) {
	o.BodyMinRate, o.BodyRateWindow = d.bodyMinRate, d.bodyRateWindow
	o.MaxRequestsPerPrincipal, o.MaxCreatesPerMinute = d.maxRequests, d.maxNewConversations
	o.RetainClosed = d.retainClosed
}
