// Package ndjson is agentry's file sink: every event as one JSON line,
// appended to a local file that a log shipper (Filebeat, Fluent Bit,
// Vector, promtail, journald) or a person with grep can read. It is the
// sink for the deployment that has a directory and no collector.
//
// What it promises:
//
//   - [Open] claims the file before it returns: it creates the parent
//     directory, opens the file for appending and reads its real size. A
//     path it cannot write (a directory, a read-only mount, a missing
//     permission) is refused there, by name, instead of starting a sink that
//     would drop every event.
//   - [Sink.Export] serialises the event into an in-memory buffer and
//     returns. It never touches the disk, never waits for the writer and
//     never panics; an event that cannot be serialised is reported through
//     Options.OnError and skipped.
//   - One goroutine writes, in the order events were accepted; a line is
//     never split or interleaved with another. Writes happen when the
//     buffer holds MaxBufferEvents events or MaxBufferBytes bytes, every
//     FlushInterval, and on [Sink.Flush] and [Sink.Close].
//   - Nothing is lost silently. A batch the disk refuses is dropped and
//     reported as "N events dropped writing to PATH: cause"; so are the
//     events a writer too slow for its producers cannot take (memory stays
//     bounded: see Options.MaxQueuedBytes). [Sink.Stats] counts it all.
//   - Rotation is one generation and only when Options.MaxBytes is set: the
//     full file becomes PATH.1, replacing any older PATH.1. Batches are
//     split at line boundaries, so the file stays within MaxBytes (or holds
//     one line larger than it), however the events were batched. A burst
//     larger than the two generations keeps its newest lines; the oldest are
//     dropped, counted and reported ([ErrRotatedAway]). Retention beyond
//     that belongs to logrotate or to the shipper.
//
// The package also reads what it writes: [Scan] decodes a stream of lines
// and counts the bad ones instead of failing on them, and [Follow] tails a
// file across rotations. Package event/audit builds reports on top.
package ndjson
