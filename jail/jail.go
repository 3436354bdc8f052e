package jail

import "errors"

// ErrNoJail is wrapped by every refusal to jail: bubblewrap or a
// util-linux program is missing, agentry is not root where the profile
// needs it, or bubblewrap cannot build a jail on this machine. The error
// names the fix; nothing falls back to running unjailed.
var ErrNoJail = errors.New("jail: cannot jail")

// Facts of every jail.
const (
	// defaultUID is the unprivileged host uid (and gid) jailed processes
	// run as unless told otherwise: 65534, "nobody".
	defaultUID = 65534
	// DefaultPath is the PATH inside a jail unless the caller gives one.
	DefaultPath = "/usr/local/bin:/usr/bin:/bin"
	// agentHome is where an agent's private HOME appears inside its jail.
	agentHome = "/home/agent"
	// insideUID is an agent's uid (and gid) as it sees itself.
	insideUID = 1000
)
