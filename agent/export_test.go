package agent

// TierBuilt reports whether a has built its teardown tier, so tests can
// check that an agent whose tools never register builds none.
func TierBuilt(a *Agent) bool { return a.tier.Load() != nil }
