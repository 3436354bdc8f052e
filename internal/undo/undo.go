// Package undo is the one cleanup stack that builders share: each step that
// acquires something pushes how to give it back, and a builder that fails
// part way gives back everything acquired so far, newest first. A builder
// that succeeds keeps what it built: it calls Keep, or hands the stack to
// whoever owns the result (its Close calls Undo).
//
// A Stack is owned by one goroutine at a time; it is not safe for
// concurrent use.
package undo

import "errors"

// Stack holds the undo steps pushed so far. The zero value is ready.
type Stack struct {
	steps []func() error
}

// Push adds a step, to run before every step pushed earlier.
func (s *Stack) Push(step func() error) {
	if step != nil {
		s.steps = append(s.steps, step)
	}
}

// PushFunc adds a step that cannot fail.
func (s *Stack) PushFunc(step func()) {
	if step != nil {
		s.Push(func() error { step(); return nil })
	}
}

// Len counts the steps held.
func (s *Stack) Len() int { return len(s.steps) }

// Undo runs every step held, newest first, even past a failing one, and
// forgets them; it returns every failure joined. A second Undo does nothing.
func (s *Stack) Undo() error {
	var errs []error
	for i := len(s.steps) - 1; i >= 0; i-- {
		if err := s.steps[i](); err != nil {
			errs = append(errs, err)
		}
	}
	s.steps = nil
	return errors.Join(errs...)
}

// Keep forgets every step without running it: what they would undo now
// belongs to the caller.
func (s *Stack) Keep() { s.steps = nil }

// Move hands the steps to a new Stack and leaves s empty, so that a builder
// can give what it acquired to the value it returns.
func (s *Stack) Move() *Stack {
	moved := &Stack{steps: s.steps}
	s.steps = nil
	return moved
}

// OnError runs Undo when *errp is not nil, and joins Undo's failures into
// it. Use it as the builder's first defer:
//
//	var stack undo.Stack
//	defer stack.OnError(&err)
func (s *Stack) OnError(errp *error) {
	if errp == nil || *errp == nil {
		return
	}
	if uerr := s.Undo(); uerr != nil {
		*errp = errors.Join(*errp, uerr)
	}
}
