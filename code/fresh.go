package code

import "strings"

// FreshStateNote is what the model is told when code fails in a session
// that has run nothing before, for want of a name: the variables it
// expected belonged to a session that is gone (closed, lost, or left
// behind by a restart while the turn was paused).
const FreshStateNote = "[this session is new: nothing defined by earlier calls exists in it (the session that held it was closed or lost, for instance by a restart); define the variables and imports again, or recompute them]"

// NoteFreshState adds FreshStateNote to the stderr of a session's first
// execute when that execute failed on an undefined name (Python's
// NameError), rather than leave the model a bare NameError. Runners that
// keep state call it on a first execute that failed.
func NoteFreshState(stderr string) string {
	if !strings.Contains(stderr, "NameError: ") || strings.Contains(stderr, FreshStateNote) {
		return stderr
	}
	if stderr != "" && !strings.HasSuffix(stderr, "\n") {
		stderr += "\n"
	}
	return stderr + FreshStateNote
}
