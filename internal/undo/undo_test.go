package undo_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/agentry-dev/agentry/internal/undo"
)

func TestUndoRunsNewestFirstPastFailures(t *testing.T) {
	var s undo.Stack
	var ran []int
	boom := errors.New("boom")
	s.PushFunc(func() { ran = append(ran, 1) })
	s.Push(func() error { ran = append(ran, 2); return boom })
	s.PushFunc(func() { ran = append(ran, 3) })
	if s.Len() != 3 {
		t.Fatalf("Len = %d, want 3", s.Len())
	}
	err := s.Undo()
	if !errors.Is(err, boom) {
		t.Fatalf("Undo = %v, want it to carry boom", err)
	}
	if !slices.Equal(ran, []int{3, 2, 1}) {
		t.Fatalf("ran %v, want [3 2 1]", ran)
	}
	if err := s.Undo(); err != nil || len(ran) != 3 {
		t.Fatalf("second Undo ran again or failed: %v %v", err, ran)
	}
}

func TestKeepAndMove(t *testing.T) {
	var s undo.Stack
	n := 0
	s.PushFunc(func() { n++ })
	moved := s.Move()
	if s.Len() != 0 || moved.Len() != 1 {
		t.Fatalf("Move left %d, moved %d", s.Len(), moved.Len())
	}
	if err := s.Undo(); err != nil || n != 0 {
		t.Fatal("an emptied stack ran a step")
	}
	moved.Keep()
	if err := moved.Undo(); err != nil || n != 0 {
		t.Fatal("a kept stack ran a step")
	}
}

func TestOnError(t *testing.T) {
	build := func(fail bool) (n int, err error) {
		var s undo.Stack
		defer s.OnError(&err)
		s.PushFunc(func() { n = -1 })
		if fail {
			return 0, errors.New("step two failed")
		}
		s.Keep()
		return 1, nil
	}
	if n, err := build(false); err != nil || n != 1 {
		t.Fatalf("success path: %d %v", n, err)
	}
	if n, err := build(true); err == nil || n != -1 {
		t.Fatalf("failure path did not undo: %d %v", n, err)
	}
}
