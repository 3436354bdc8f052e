package jail

import "errors"

// ErrNoJail is wrapped by every refusal to jail: bubblewrap or a
// util-linux program is missing, agentry is not root where the profile
// needs it, or bubblewrap cannot build a jail on this machine. The error
// names the fix; nothing falls back to running unjailed.
var ErrNoJail = errors.New("jail: cannot jail")

// Facts of every jail.
const (
	// DefaultUID is the unprivileged host uid (and gid) jailed processes
	// run as unless told otherwise: 65534, "nobody".
	DefaultUID = 65534
	// DefaultPath is the PATH inside a jail unless the caller gives one.
	DefaultPath = "/usr/local/bin:/usr/bin:/bin"
	// Home is where an agent's private HOME appears inside its jail.
	Home = "/home/agent"
	// InsideUID is an agent's uid (and gid) as it sees itself.
	InsideUID = 1000
)
