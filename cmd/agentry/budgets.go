package main

import (
	"bytes"
	"crypto/sha256"
	"fmt"

	"github.com/agentry-dev/agentry/host"
)

// budgetsFile is serve's --budgets file as last read, and its digest, so
// that the poll can tell an edit.
type budgetsFile struct {
	path string
	sum  [sha256.Size]byte
}

// loadBudgets reads and parses a budgets file; "" is none.
func loadBudgets(path string) (*host.Budgets, [sha256.Size]byte, error) {
	if path == "" {
		return nil, [sha256.Size]byte{}, nil
	}
	b, err := readBounded(path)
	if err != nil {
		return nil, [sha256.Size]byte{}, fmt.Errorf("reading the budgets file: %w", err)
	}
	sum := sha256.Sum256(b)
	if len(b) > host.MaxBudgetsBytes {
		return nil, sum, fmt.Errorf("%s is over %d bytes", path, host.MaxBudgetsBytes)
	}
	bud, err := host.ParseBudgets(b)
	if err != nil {
		return nil, sum, fmt.Errorf("%s: %w", path, err)
	}
	return bud, sum, nil
}

// followBudgets makes --budgets reloadable, when serve started with a
// budgets file: a reload (SIGHUP, a --config change, or an edit of the
// budgets file, which the poll sees) reads the file named then and hands
// it to the host; a file that does not parse keeps the budgets that ran
// before, and the reload's line says why. A serve started without one
// takes budgets on at a restart (the reload's line says so).
func (s *server) followBudgets() {
	s.running["budgets"] = s.o.budgets
	s.onReload("budgets", func(path string) (string, error) {
		b, sum, err := loadBudgets(path)
		s.budgetsSeen = budgetsFile{path: path, sum: sum} // an edit that failed is not reloaded again until it changes
		if err != nil {
			return "", err
		}
		s.host.SetBudgets(b)
		if path == "" {
			return "none", nil
		}
		return fmt.Sprintf("%s from %s", b, path), nil
	})
}

// budgetsChanged reports whether the budgets file's bytes differ from
// those last read.
func (s *server) budgetsChanged() bool {
	f := s.budgetsSeen
	if f.path == "" {
		return false
	}
	b, err := readBounded(f.path)
	if err != nil {
		return false
	}
	sum := sha256.Sum256(b)
	return !bytes.Equal(sum[:], f.sum[:])
}
