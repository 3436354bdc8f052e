package ndjson

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/tool"
)

// fill sets every field of the struct v points to a non-zero value, so
// that omitempty fields are written too.
func fill(v reflect.Value, seed int) {
	v = v.Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		if !f.CanSet() {
			continue
		}
		switch f.Kind() {
		case reflect.String:
			f.SetString("v<&>\u2028\"é\x01" + strings.Repeat("x", seed%3))
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Int, reflect.Int64, reflect.Int32:
			f.SetInt(int64(-7 - seed))
		case reflect.Uint, reflect.Uint64, reflect.Uint32:
			f.SetUint(uint64(9 + seed))
		case reflect.Float64, reflect.Float32:
			f.SetFloat(1.25e-7 * float64(seed+1))
		case reflect.Pointer:
			p := reflect.New(f.Type().Elem())
			if p.Elem().Kind() == reflect.Int {
				p.Elem().SetInt(3)
			}
			f.Set(p)
		}
	}
}

func TestEncodingMatchesEncodingJSONForEveryType(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 30, 9, 0, 0, 123456789, time.FixedZone("x", 5*3600+1800))
	for i, typ := range event.Types() {
		for _, full := range []bool{false, true} {
			p := event.NewPayload(typ)
			if full {
				fill(reflect.ValueOf(p), i)
			}
			e := event.Event{Type: typ, Payload: p, Meta: event.Meta{RunID: "run-1", Seq: uint64(i), Time: at}}
			if full {
				e.Meta = event.Meta{RunID: "r", SessionID: "s", Tenant: "t<", Principal: "p", AgentID: "a", Seq: 1 << 60, Time: at.UTC()}
			}
			want, err := json.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			got, err := appendEvent(nil, e)
			if err != nil {
				t.Fatalf("%s: %v", typ, err)
			}
			if string(got) != string(want)+"\n" {
				t.Fatalf("%s:\n got %s\nwant %s", typ, got, want)
			}
			// Every type of the event package is on a hot path. (The
			// jail's runner statements, sent once at a start, hold lists
			// and take encoding/json's path.)
			if encoderFor(reflect.TypeOf(p)) == nil {
				t.Errorf("%s payload takes the slow path", typ)
			}
		}
	}
	if !fastEnvelope {
		t.Fatal("the hand-written envelope no longer matches encoding/json")
	}
}

type oddPayload struct {
	Tagged    string            `json:"renamed"`
	Dash      int               `json:"-"`
	DashComma int               `json:"-,"`
	BadTag    int               `json:"a\\b"`
	Empty     string            `json:",omitempty"`
	Ptr       *float64          `json:"ptr"`
	PtrOmit   *bool             `json:"ptrOmit,omitempty"`
	When      time.Time         `json:"when,omitempty"`
	Small     float32           `json:"small"`
	NegZero   float64           `json:"negZero,omitempty"`
	U8        uint8             `json:"u8"`
	Dur       time.Duration     `json:"dur"`
	unexp     string            //nolint:unused
	Map       map[string]string `json:"map,omitempty"`
}

type named string

type textual struct{ V string }

func (t textual) MarshalText() ([]byte, error) { return []byte("T" + t.V), nil }

func TestEncodingOddShapes(t *testing.T) {
	t.Parallel()
	f := 1e21
	values := []any{
		nil,
		&oddPayload{Tagged: "a", Dash: 1, DashComma: 2, BadTag: 3, Ptr: &f, Small: 1e-7, NegZero: math.Copysign(0, -1), U8: 200, Dur: time.Second},
		oddPayload{},
		(*oddPayload)(nil),
		&oddPayload{Map: map[string]string{"k": "v"}}, // map: the slow path
		json.RawMessage(`{"x": [1, 2]}`),
		map[string]any{"z": 1, "a": []int{1}},
		"just a string",
		named("n"),
		textual{"x"},
		&textual{"y"},
		struct {
			textual
			A int
		}{textual{"e"}, 1},
		struct{ N named }{"q"},
		[]int{1, 2},
		42,
	}
	for _, v := range values {
		e := event.Event{Type: "vendor.odd", Payload: v, Meta: event.Meta{Time: time.Unix(0, 0).UTC()}}
		want, werr := json.Marshal(e)
		got, gerr := appendEvent(nil, e)
		if (werr != nil) != (gerr != nil) {
			t.Fatalf("%#v: encoding/json err %v, ours %v", v, werr, gerr)
		}
		if werr == nil && string(got) != string(want)+"\n" {
			t.Fatalf("%#v:\n got %s\nwant %s", v, got, want)
		}
	}
}

func TestEncodingRefusesWhatJSONRefuses(t *testing.T) {
	t.Parallel()
	bad := []event.Event{
		{Type: tool.TypeCallEnd, Payload: &tool.CallEnd{DurationMs: math.NaN()}},
		{Type: tool.TypeCallEnd, Payload: &tool.CallEnd{DurationMs: math.Inf(-1)}},
		{Type: "x", Payload: make(chan int)},
		{Type: "x", Payload: func() {}},
		{Type: "x", Meta: event.Meta{Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}},
		{Type: "x", Meta: event.Meta{Time: time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)}},
		{Type: "x", Meta: event.Meta{Time: time.Date(2020, 1, 1, 0, 0, 0, 0, time.FixedZone("far", 24*3600))}},
		{Type: "x", Payload: struct{ T time.Time }{time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}},
	}
	for _, e := range bad {
		if _, err := json.Marshal(e); err == nil {
			t.Fatalf("encoding/json accepts %#v; the case is wrong", e)
		}
		if out, err := appendEvent([]byte("keep"), e); err == nil || string(out) != "keep" {
			t.Fatalf("%#v: out %q, err %v; want an error and dst untouched", e, out, err)
		}
	}
}

// FuzzEncodingMatchesEncodingJSON holds the fast encoder to encoding/json
// on arbitrary strings, numbers and times.
func FuzzEncodingMatchesEncodingJSON(f *testing.F) {
	f.Add("run_code", "call-1", 1.25, int64(3), uint64(7), true, int64(0), int32(1e6))
	f.Add("<script>&\u2028\u2029\x00\xff", "\"\\\t\n", 1e-7, int64(-1), uint64(math.MaxUint64), false, int64(1700000000123456789), int32(-3600))
	f.Add("", "\xed\xa0\x80", 1e21, int64(math.MinInt64), uint64(0), true, int64(-62135596800000000), int32(86399))
	f.Fuzz(func(t *testing.T, s1, s2 string, fl float64, i int64, u uint64, b bool, nanos int64, offset int32) {
		type payload struct {
			A string   `json:"a"`
			B string   `json:"b,omitempty"`
			F float64  `json:"f"`
			G float32  `json:"g,omitempty"`
			I int64    `json:"i"`
			U uint64   `json:"u,omitempty"`
			Q bool     `json:"q"`
			P *string  `json:"p,omitempty"`
			R *float64 `json:"r"`
		}
		at := time.Unix(0, nanos).In(time.FixedZone("z", int(offset)))
		e := event.Event{
			Type:    event.Type(s1),
			Payload: &payload{A: s1, B: s2, F: fl, G: float32(fl), I: i, U: u, Q: b, P: &s2},
			Meta:    event.Meta{RunID: s2, Tenant: s1, Seq: u, Time: at},
		}
		want, werr := json.Marshal(e)
		got, gerr := appendEvent(nil, e)
		if (werr != nil) != (gerr != nil) {
			t.Fatalf("encoding/json err %v, ours %v", werr, gerr)
		}
		if werr == nil && string(got) != string(want)+"\n" {
			t.Fatalf("\n got %s\nwant %s", got, want)
		}
	})
}

// The per-second cache must not change a byte: same second, other
// fractions, other zones, and back again.
func TestTimeCacheMatchesMarshalJSON(t *testing.T) {
	t.Parallel()
	locs := []*time.Location{time.UTC, time.Local, time.FixedZone("x", -9*3600-1800), time.FixedZone("y", 0)}
	if ny, err := time.LoadLocation("America/New_York"); err == nil {
		locs = append(locs, ny)
	}
	base := time.Date(2026, 3, 8, 6, 59, 58, 0, time.UTC) // around a DST change in New York
	for i := range 4000 {
		tm := base.Add(time.Duration(i%7) * 300 * time.Millisecond).Add(time.Duration(i*7919) % time.Second).In(locs[i%len(locs)])
		want, _ := tm.MarshalJSON()
		got, err := appendTime(nil, tm)
		if err != nil || string(got) != string(want) {
			t.Fatalf("%v: got %s (%v), want %s", tm, got, err, want)
		}
	}
}
