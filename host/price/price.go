// Package price turns a turn's tokens into an estimated cost: a table of
// per-model prices (USD per million input, output, cache-read and
// cache-write tokens), shipped with the vendors' public list prices for
// the models agentry's docs name ([Default]) and replaceable by an
// operator's file ([Parse]). A model the table does not know has no cost:
// [Table.Cost] says so, and a caller records "unknown", never zero.
package price

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"

	"github.com/agentry-dev/agentry/llm"
)

//go:embed prices.json
var shipped []byte

// MaxFileBytes bounds a price file.
const MaxFileBytes = 1 << 20

// maxEntries bounds the prices one table holds.
const maxEntries = 10000

// maxPrice bounds one price (USD per million tokens): far above any
// model's, low enough that no turn's cost overflows.
const maxPrice = 100000

// Entry is one model's prices, in USD per million tokens.
type Entry struct {
	// Provider names the vendor (for people; lookups go by model).
	Provider string `json:"provider,omitempty"`
	// Model is the model's name as the vendor's API answers with it, or
	// a prefix ending in "*" that matches every name starting with it
	// (dated snapshots of one model). The longest match wins.
	Model  string  `json:"model"`
	Input  float64 `json:"input"`
	Output float64 `json:"output"`
	// CacheRead and CacheWrite price the input tokens read from and
	// written to the prompt cache; omitted, they cost what Input does.
	CacheRead  *float64 `json:"cacheRead,omitempty"`
	CacheWrite *float64 `json:"cacheWrite,omitempty"`
}

// Table is a price table. It is immutable once made, and safe for
// concurrent use.
type Table struct {
	// Version names the table; every usage record keeps the version it
	// was priced with.
	Version string
	exact   map[string]Entry
	prefix  []Entry // longest first
}

type file struct {
	Version string  `json:"version"`
	Source  string  `json:"source,omitempty"`
	Prices  []Entry `json:"prices"`
}

// Parse reads a price table: a JSON object with a "version" (required:
// it is stored with every record) and "prices", a list of entries.
func Parse(data []byte) (*Table, error) {
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("price: the table is over %d bytes; keep the models you use", MaxFileBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f file
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("price: the table is not a JSON object of version and prices: %w", err)
	}
	if dec.More() {
		return nil, errors.New("price: the table has more after its JSON object; a file holds one table")
	}
	if f.Version = strings.TrimSpace(f.Version); f.Version == "" || len(f.Version) > 64 {
		return nil, errors.New(`price: the table needs a "version" of 1 to 64 characters (it is stored with every usage record)`)
	}
	if len(f.Prices) > maxEntries {
		return nil, fmt.Errorf("price: the table has over %d prices", maxEntries)
	}
	t := &Table{Version: f.Version, exact: make(map[string]Entry, len(f.Prices))}
	seen := map[string]bool{}
	for i, e := range f.Prices {
		if err := check(e); err != nil {
			return nil, fmt.Errorf("price: entry %d (%q): %w", i, e.Model, err)
		}
		if seen[e.Model] {
			return nil, fmt.Errorf("price: model %q is priced twice; keep one entry", e.Model)
		}
		seen[e.Model] = true
		if p, ok := strings.CutSuffix(e.Model, "*"); ok {
			e.Model = p
			t.prefix = append(t.prefix, e)
		} else {
			t.exact[e.Model] = e
		}
	}
	// Longest prefix first, so the first match is the most specific.
	for i := 1; i < len(t.prefix); i++ {
		for j := i; j > 0 && len(t.prefix[j].Model) > len(t.prefix[j-1].Model); j-- {
			t.prefix[j], t.prefix[j-1] = t.prefix[j-1], t.prefix[j]
		}
	}
	return t, nil
}

func check(e Entry) error {
	name := strings.TrimSuffix(e.Model, "*")
	switch {
	case name == "" || len(e.Model) > 200:
		return errors.New(`"model" is required (a name, or a prefix ending in "*"), at most 200 characters`)
	case strings.Contains(name, "*"):
		return errors.New(`a "*" may only end a model's name`)
	}
	for _, p := range []struct {
		name string
		v    *float64
	}{{"input", &e.Input}, {"output", &e.Output}, {"cacheRead", e.CacheRead}, {"cacheWrite", e.CacheWrite}} {
		if p.v == nil {
			continue
		}
		if v := *p.v; math.IsNaN(v) || v < 0 || v > maxPrice {
			return fmt.Errorf("%q is %v; a price is 0 to %d USD per million tokens", p.name, v, maxPrice)
		}
	}
	return nil
}

var (
	defaultOnce  sync.Once
	defaultTable *Table
)

// Default is the table agentry ships.
func Default() *Table {
	defaultOnce.Do(func() {
		t, err := Parse(shipped)
		if err != nil {
			panic("price: the shipped table does not parse: " + err.Error())
		}
		defaultTable = t
	})
	return defaultTable
}

// Lookup returns the prices of model: its own entry, else the longest
// prefix that matches it.
func (t *Table) Lookup(model string) (Entry, bool) {
	if e, ok := t.exact[model]; ok {
		return e, true
	}
	for _, e := range t.prefix {
		if strings.HasPrefix(model, e.Model) {
			return e, true
		}
	}
	return Entry{}, false
}

// Nano is an amount in billionths of a US dollar: fine enough for one
// model call of a few tokens, wide enough for any host's total.
type Nano int64

// USD is the amount in dollars.
func (n Nano) USD() float64 { return float64(n) / 1e9 }

// Cost prices what a turn used: per model (the models the table knows)
// and in all. ok is false when a model that used tokens is not in the
// table: the total is then unknown (not zero), and unknown names those
// models.
func (t *Table) Cost(u llm.TurnUsage) (total Nano, ok bool, perModel map[string]Nano, unknown []string) {
	for model, tok := range u.Models {
		if tok == (llm.Usage{}) {
			continue
		}
		e, found := t.Lookup(model)
		if !found {
			unknown = append(unknown, model)
			continue
		}
		if perModel == nil {
			perModel = make(map[string]Nano, len(u.Models))
		}
		c := e.price(tok)
		perModel[model] = c
		total += c
	}
	if len(unknown) > 0 {
		return 0, false, perModel, unknown
	}
	return total, true, perModel, nil
}

// price is what tokens cost at e: InputTokens counts the cached tokens
// too, which are priced at the cache rates instead.
func (e Entry) price(tok llm.Usage) Nano {
	read, write := e.Input, e.Input
	if e.CacheRead != nil {
		read = *e.CacheRead
	}
	if e.CacheWrite != nil {
		write = *e.CacheWrite
	}
	plain := max(0, tok.InputTokens-tok.CacheReadTokens-tok.CacheWriteTokens)
	// USD per million tokens is nano-USD per thousandth of a token: a
	// token at p costs p*1000 nano-USD.
	return Nano(math.Round(1000 * (float64(plain)*e.Input + float64(tok.OutputTokens)*e.Output +
		float64(tok.CacheReadTokens)*read + float64(tok.CacheWriteTokens)*write)))
}
