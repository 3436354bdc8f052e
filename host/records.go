package host

import (
	"context"
	"reflect"
	"slices"
	"sync"

	"github.com/agentry-dev/agentry/provider"
	"github.com/agentry-dev/agentry/tool"
)

// Records is the port through which a provider keeps its own record of
// each conversation (provider/native keeps the agent's transcript and its
// turn marks) in the host's store, under the conversation's binding, so
// the record and the host's conversation share one database and a turn's
// two writes can share one transaction. host/sqlstore's Store implements
// it; provider/native's HostStore stands on it. Implementations must be
// safe for concurrent use.
//
// A record is opaque to the store but for its shape: a head, written
// whole; entries that only grow (written from the first the store lacks,
// so a turn writes what it added, not the whole conversation); and marks
// of where each turn ended, which also only grow. A record with fewer
// entries or marks than stored replaces them.
type Records interface {
	// LoadRecord returns the record stored under b, or ErrNoRecord.
	LoadRecord(ctx context.Context, b provider.Binding) (StoredRecord, error)
	// SaveRecord writes w at once, in a transaction of its own; with
	// w.Fence set it is refused (ErrFenced) as the host's own writes are.
	SaveRecord(ctx context.Context, w RecordWrite) error
	// Marked reports whether the record under b marks the end of the
	// turn turnID (false when nothing is stored under b).
	Marked(ctx context.Context, b provider.Binding, turnID string) (bool, error)
}

// RecordDropper is the optional port of a [Records] store that removes a
// record no conversation holds: a provider session opened for a
// conversation that is then refused (its clone at open failed) leaves
// its record behind, and the host drops it. host/sqlstore's Store
// implements it.
type RecordDropper interface {
	// DropRecord removes the record stored under b, if any.
	DropRecord(ctx context.Context, b provider.Binding) error
}

// Record is a provider's record as it is written.
type Record struct {
	// Head is everything but the entries and marks, encoded by the
	// provider.
	Head []byte
	// Entries counts the record's entries; Entry encodes entry i, and is
	// called only for the entries the store does not hold yet.
	Entries int
	Entry   func(i int) ([]byte, error)
	// Marks say where each turn ended, in order.
	Marks []RecordMark
}

// RecordMark says that the turn TurnID (the host's turn id) ended with
// the record's first Entries entries.
type RecordMark struct {
	TurnID  string
	Entries int
}

// StoredRecord is a provider's record as it is read back.
type StoredRecord struct {
	Head    []byte
	Entries [][]byte
	Marks   []RecordMark
}

// RecordWrite is one record to write, under its conversation's binding.
type RecordWrite struct {
	Binding provider.Binding
	Record  Record
	// Fence, when set, is the conversation the record belongs to and the
	// lease epoch of the replica writing it: the write is refused
	// (ErrFenced) once a newer epoch has written the conversation.
	Fence *Fence
}

// Fence names a conversation and the lease epoch a write is made under.
type Fence struct {
	Owner        tool.Identity
	Conversation string
	Epoch        int64
}

// SaveRecord writes a provider's record through rs. Outside a turn the
// host runs, it is written at once. Within one (the context the host
// gives a provider session's RunTurn and Resolve) the write carries the
// turn's fence — refused once this replica can no longer be sure it holds
// the conversation — and, when later is true and rs is the host's own
// store, it goes in the host's save of the turn's end, in its
// transaction: a turn then costs one commit, and if that save is refused
// the record is not written either (its next write writes it whole).
// Pass later false for what must be stored before the turn goes on (a
// pause stored or given up).
func SaveRecord(ctx context.Context, rs Records, w RecordWrite, later bool) error {
	sc, _ := ctx.Value(turnScopeKey{}).(*turnScope)
	if sc == nil {
		return rs.SaveRecord(ctx, w)
	}
	if err := sc.check(); err != nil {
		return err
	}
	w.Fence = sc.fence
	if later && sc.carries(rs) {
		sc.carry(w)
		return nil
	}
	// This write holds the whole record: one waiting for the turn's save
	// is older, and must not land after it.
	sc.drop(w.Binding)
	return rs.SaveRecord(ctx, w)
}

type turnScopeKey struct{}

// turnScope is what a turn's context tells SaveRecord: the store whose
// save ends the turn, the turn's fence, and the records waiting for that
// save.
type turnScope struct {
	records Records      // the host's store, when it keeps records
	fence   *Fence       // nil without leases
	check   func() error // the lease deadline; nil without leases

	mu      sync.Mutex
	carried []RecordWrite
}

func newTurnScope(st Store, fence *Fence, check func() error) *turnScope {
	rs, _ := st.(Records)
	if check == nil {
		check = func() error { return nil }
	}
	return &turnScope{records: rs, fence: fence, check: check}
}

// carries reports whether rs is the store the turn's save goes to.
func (sc *turnScope) carries(rs Records) bool {
	if sc.records == nil || rs == nil {
		return false
	}
	a, b := reflect.TypeOf(sc.records), reflect.TypeOf(rs)
	return a == b && a.Comparable() && sc.records == rs
}

// carry keeps w for the turn's save; a later write of the same record
// replaces an earlier one (it holds all of it).
func (sc *turnScope) carry(w RecordWrite) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	for i := range sc.carried {
		if sc.carried[i].Binding == w.Binding {
			sc.carried[i] = w
			return
		}
	}
	sc.carried = append(sc.carried, w)
}

// drop forgets the record of b waiting for the turn's save, if any.
func (sc *turnScope) drop(b provider.Binding) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.carried = slices.DeleteFunc(sc.carried, func(w RecordWrite) bool { return w.Binding == b })
}

// take returns the records waiting for the turn's save and forgets them.
func (sc *turnScope) take() []RecordWrite {
	if sc == nil {
		return nil
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	out := sc.carried
	sc.carried = nil
	return out
}
