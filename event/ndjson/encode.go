package ndjson

import (
	"encoding"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"github.com/agentry-dev/agentry/event"
)

// The encoder writes exactly the bytes json.Marshal(e) writes for an
// event.Event, without going through encoding/json's reflection walk for
// the envelope: the envelope and Meta are written by hand, and a payload
// that is a plain struct (or a pointer to one) of strings, numbers, bools,
// times and pointers to those is written by a per-type field list compiled
// once. Anything else — maps, slices, interfaces, embedded structs, types
// with their own MarshalJSON or MarshalText — goes through json.Marshal, so
// the output never depends on which path ran. Tests hold the two paths to
// byte equality, and a fuzz test compares them on arbitrary values.

// appendEvent appends e's JSON form and a newline to dst. On error dst is
// returned unchanged in length (the caller drops the event).
func appendEvent(dst []byte, e event.Event) ([]byte, error) {
	if !fastEnvelope {
		b, err := json.Marshal(e)
		if err != nil {
			return dst, err
		}
		return append(append(dst, b...), '\n'), nil
	}
	return appendEnvelope(dst, e)
}

func appendEnvelope(dst []byte, e event.Event) ([]byte, error) {
	n0 := len(dst)
	dst = append(dst, `{"type":`...)
	dst = appendString(dst, string(e.Type))
	dst = append(dst, `,"payload":`...)
	var err error
	dst, err = appendPayload(dst, e.Payload)
	if err != nil {
		return dst[:n0], err
	}
	dst = append(dst, `,"meta":`...)
	dst, err = appendMeta(dst, &e.Meta)
	if err != nil {
		return dst[:n0], err
	}
	dst = append(dst, '}', '\n')
	return dst, nil
}

func appendMarshalled(dst []byte, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return dst, err
	}
	return append(dst, b...), nil
}

func appendMeta(dst []byte, m *event.Meta) ([]byte, error) {
	dst = append(dst, '{')
	first := true
	for _, f := range [...]struct {
		key string
		val string
	}{{`"runId":`, m.RunID}, {`"sessionId":`, m.SessionID}, {`"tenant":`, m.Tenant}, {`"principal":`, m.Principal}, {`"agentId":`, m.AgentID}} {
		if f.val == "" {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, f.key...)
		dst = appendString(dst, f.val)
	}
	if !first {
		dst = append(dst, ',')
	}
	dst = append(dst, `"seq":`...)
	dst = strconv.AppendUint(dst, m.Seq, 10)
	dst = append(dst, `,"time":`...)
	var err error
	dst, err = appendTime(dst, m.Time)
	if err != nil {
		return dst, err
	}
	return append(dst, '}'), nil
}

// fastEnvelope is false when event.Event or event.Meta no longer has the
// shape appendMeta writes by hand (someone added a field): the sink then
// marshals whole events with encoding/json rather than write a wrong line.
var fastEnvelope = envelopeMatches()

func envelopeMatches() bool {
	probe := event.Event{
		Type:    "agentry.probe.check",
		Payload: &struct{ A string }{"x"},
		Meta: event.Meta{RunID: "r", SessionID: "s", Tenant: "t", Principal: "p", AgentID: "a", Seq: 7,
			Time: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)},
	}
	want, err := json.Marshal(probe)
	if err != nil {
		return false
	}
	got, err := appendEnvelope(nil, probe)
	return err == nil && string(got) == string(want)+"\n"
}

// secondCache holds the formatted date, time of day and zone of one second
// in one location: events come in time order, so most events of a burst
// share it and only the fraction needs formatting.
type secondCache struct {
	unix   int64
	loc    *time.Location
	date   [len("2006-01-02T15:04:05")]byte
	zone   string // "Z" or "+07:00"
	usable bool
}

var lastSecond atomic.Pointer[secondCache]

// appendTime writes t as time.Time.MarshalJSON does, refusing the same
// instants (years outside 0–9999, zone offsets of 24 hours or more).
func appendTime(dst []byte, t time.Time) ([]byte, error) {
	sec, loc := t.Unix(), t.Location()
	if c := lastSecond.Load(); c != nil && c.unix == sec && c.loc == loc && c.usable {
		dst = append(dst, '"')
		dst = append(dst, c.date[:]...)
		if ns := t.Nanosecond(); ns != 0 {
			dst = appendFraction(dst, ns)
		}
		dst = append(dst, c.zone...)
		return append(dst, '"'), nil
	}
	out, err := appendTimeSlow(dst, t)
	if err == nil {
		c := &secondCache{unix: sec, loc: loc}
		b := out[len(dst)+1 : len(out)-1] // without the quotes
		if len(b) >= len(c.date) {
			copy(c.date[:], b)
			rest := b[len(c.date):]
			if len(rest) > 0 && rest[0] == '.' {
				i := 1
				for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
					i++
				}
				rest = rest[i:]
			}
			c.zone = string(rest)
			c.usable = true
			lastSecond.Store(c)
		}
	}
	return out, err
}

// appendFraction writes ".ddddddddd" without trailing zeros, as
// RFC3339Nano does.
func appendFraction(dst []byte, ns int) []byte {
	var digits [10]byte
	digits[0] = '.'
	for i := 9; i >= 1; i-- {
		digits[i] = byte('0' + ns%10)
		ns /= 10
	}
	n := 10
	for digits[n-1] == '0' {
		n--
	}
	return append(dst, digits[:n]...)
}

func appendTimeSlow(dst []byte, t time.Time) ([]byte, error) {
	n0 := len(dst)
	dst = append(dst, '"')
	dst = t.AppendFormat(dst, time.RFC3339Nano)
	b := dst[n0+1:]
	if len(b) < 5 || b[4] != '-' {
		return dst[:n0], errors.New("time outside years 0–9999 cannot be written as RFC 3339")
	}
	if b[len(b)-1] != 'Z' {
		c := b[len(b)-6]
		h := 10*int(b[len(b)-5]-'0') + int(b[len(b)-4]-'0')
		if ('0' <= c && c <= '9') || h >= 24 {
			return dst[:n0], errors.New("time zone offset of 24 hours or more cannot be written as RFC 3339")
		}
	}
	return append(dst, '"'), nil
}

// appendPayload writes v through its compiled encoder, or json.Marshal.
func appendPayload(dst []byte, v any) ([]byte, error) {
	if v == nil {
		return append(dst, "null"...), nil
	}
	rv := reflect.ValueOf(v)
	enc := encoderFor(rv.Type())
	if enc == nil {
		return appendMarshalled(dst, v)
	}
	if rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return append(dst, "null"...), nil
		}
		return enc.appendAt(dst, rv.UnsafePointer())
	}
	return enc.append(dst, rv)
}

var (
	encoders sync.Map // reflect.Type → *structEncoder, or noEncoder
	noEnc    = &structEncoder{}
)

// encoderFor returns the compiled encoder for t (a struct or a pointer to
// one), or nil when t must go through encoding/json.
func encoderFor(t reflect.Type) *structEncoder {
	if e, ok := encoders.Load(t); ok {
		if e == noEnc {
			return nil
		}
		return e.(*structEncoder)
	}
	e := compile(t)
	if e == nil {
		encoders.Store(t, noEnc)
		return nil
	}
	encoders.Store(t, e)
	return e
}

type fieldKind uint8

const (
	kString fieldKind = iota
	kBool
	kInt
	kUint
	kFloat32
	kFloat64
	kTime
)

type field struct {
	index     int
	offset    uintptr      // of the field in the struct
	rkind     reflect.Kind // of the field's (pointed-to) type, for its size
	key       string       // `"name":`, escaped as encoding/json escapes it
	kind      fieldKind
	ptr       bool // the field is a pointer to kind
	omitEmpty bool
}

type structEncoder struct {
	fields []field
}

var (
	marshalerType     = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
	timeType          = reflect.TypeFor[time.Time]()
)

func customMarshal(t reflect.Type) bool {
	return t.Implements(marshalerType) || t.Implements(textMarshalerType) ||
		reflect.PointerTo(t).Implements(marshalerType) || reflect.PointerTo(t).Implements(textMarshalerType)
}

func compile(t reflect.Type) *structEncoder {
	if t.Kind() == reflect.Pointer {
		if customMarshal(t) {
			return nil
		}
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || customMarshal(t) {
		return nil
	}
	enc := &structEncoder{}
	seen := map[string]bool{}
	for i := range t.NumField() {
		sf := t.Field(i)
		if sf.Anonymous {
			return nil // embedding has promotion rules; leave it to encoding/json
		}
		if !sf.IsExported() {
			continue
		}
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if !validTagName(name) {
			name = sf.Name
		}
		f := field{index: i}
		for opt := range strings.SplitSeq(opts, ",") {
			switch opt {
			case "omitempty":
				f.omitEmpty = true
			case "omitzero", "string":
				return nil // rare options with their own rules: encoding/json
			}
		}
		ft := sf.Type
		if ft.Kind() == reflect.Pointer {
			f.ptr = true
			if customMarshal(ft) {
				return nil
			}
			ft = ft.Elem()
		}
		k, ok := kindOf(ft)
		if !ok {
			return nil
		}
		f.kind = k
		f.offset, f.rkind = sf.Offset, ft.Kind()
		if seen[name] {
			return nil // duplicate names: encoding/json's tie-break rules apply
		}
		seen[name] = true
		f.key = string(appendString(nil, name)) + ":"
		enc.fields = append(enc.fields, f)
	}
	return enc
}

func kindOf(t reflect.Type) (fieldKind, bool) {
	if t == timeType {
		return kTime, true
	}
	if customMarshal(t) {
		return 0, false
	}
	switch t.Kind() {
	case reflect.String:
		return kString, true
	case reflect.Bool:
		return kBool, true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return kInt, true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return kUint, true
	case reflect.Float32:
		return kFloat32, true
	case reflect.Float64:
		return kFloat64, true
	}
	return 0, false
}

// validTagName mirrors encoding/json's rule for a usable name in a tag.
func validTagName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if strings.ContainsRune("!#$%&()*+-./:;<=>?@[]^_{|}~ ", c) {
			continue
		}
		if !unicode.IsLetter(c) && !unicode.IsDigit(c) {
			return false
		}
	}
	return true
}

func (enc *structEncoder) append(dst []byte, v reflect.Value) ([]byte, error) {
	dst = append(dst, '{')
	first := true
	for i := range enc.fields {
		f := &enc.fields[i]
		fv := v.Field(f.index)
		if f.ptr {
			if fv.IsNil() {
				if f.omitEmpty {
					continue
				}
				if !first {
					dst = append(dst, ',')
				}
				first = false
				dst = append(dst, f.key...)
				dst = append(dst, "null"...)
				continue
			}
			fv = fv.Elem()
		} else if f.omitEmpty && f.kind != kTime && fv.IsZero() {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, f.key...)
		var err error
		switch f.kind {
		case kString:
			dst = appendString(dst, fv.String())
		case kBool:
			dst = strconv.AppendBool(dst, fv.Bool())
		case kInt:
			dst = strconv.AppendInt(dst, fv.Int(), 10)
		case kUint:
			dst = strconv.AppendUint(dst, fv.Uint(), 10)
		case kFloat32:
			dst, err = appendFloat(dst, fv.Float(), 32)
		case kFloat64:
			dst, err = appendFloat(dst, fv.Float(), 64)
		case kTime:
			dst, err = appendTime(dst, fv.Interface().(time.Time))
		}
		if err != nil {
			return dst, fmt.Errorf("field %s: %w", strings.TrimSuffix(f.key, ":"), err)
		}
	}
	return append(dst, '}'), nil
}

// appendAt is append for a struct at base, the common case of a pointer
// payload. It reads each field at the offset and with the kind compile
// recorded from the struct's own reflect.Type, instead of going through
// reflect.Value for every field.
func (enc *structEncoder) appendAt(dst []byte, base unsafe.Pointer) ([]byte, error) {
	dst = append(dst, '{')
	first := true
	for i := range enc.fields {
		f := &enc.fields[i]
		p := unsafe.Add(base, f.offset)
		if f.ptr {
			p = *(*unsafe.Pointer)(p)
			if p == nil {
				if f.omitEmpty {
					continue
				}
				if !first {
					dst = append(dst, ',')
				}
				first = false
				dst = append(dst, f.key...)
				dst = append(dst, "null"...)
				continue
			}
		}
		var (
			str   string
			b     bool
			n     int64
			u     uint64
			fl    float64
			empty bool
		)
		switch f.rkind {
		case reflect.String:
			str = *(*string)(p)
			empty = str == ""
		case reflect.Bool:
			b = *(*bool)(p)
			empty = !b
		case reflect.Int:
			n = int64(*(*int)(p))
		case reflect.Int8:
			n = int64(*(*int8)(p))
		case reflect.Int16:
			n = int64(*(*int16)(p))
		case reflect.Int32:
			n = int64(*(*int32)(p))
		case reflect.Int64:
			n = *(*int64)(p)
		case reflect.Uint:
			u = uint64(*(*uint)(p))
		case reflect.Uint8:
			u = uint64(*(*uint8)(p))
		case reflect.Uint16:
			u = uint64(*(*uint16)(p))
		case reflect.Uint32:
			u = uint64(*(*uint32)(p))
		case reflect.Uint64:
			u = *(*uint64)(p)
		case reflect.Uintptr:
			u = uint64(*(*uintptr)(p))
		case reflect.Float32:
			x := *(*float32)(p)
			fl, empty = float64(x), math.Float32bits(x) == 0
		case reflect.Float64:
			fl = *(*float64)(p)
			empty = math.Float64bits(fl) == 0
		}
		switch f.kind {
		case kInt:
			empty = n == 0
		case kUint:
			empty = u == 0
		case kTime:
			empty = false // encoding/json never omits a struct
		}
		if f.omitEmpty && !f.ptr && empty {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, f.key...)
		var err error
		switch f.kind {
		case kString:
			dst = appendString(dst, str)
		case kBool:
			dst = strconv.AppendBool(dst, b)
		case kInt:
			dst = strconv.AppendInt(dst, n, 10)
		case kUint:
			dst = strconv.AppendUint(dst, u, 10)
		case kFloat32:
			dst, err = appendFloat(dst, fl, 32)
		case kFloat64:
			dst, err = appendFloat(dst, fl, 64)
		case kTime:
			dst, err = appendTime(dst, *(*time.Time)(p))
		}
		if err != nil {
			return dst, fmt.Errorf("field %s: %w", strings.TrimSuffix(f.key, ":"), err)
		}
	}
	return append(dst, '}'), nil
}

// appendFloat writes f the way encoding/json does: like an ES6 number,
// exponent form only for very small or very large magnitudes.
func appendFloat(dst []byte, f float64, bits int) ([]byte, error) {
	if f != f || f > maxFloat || f < -maxFloat {
		return dst, fmt.Errorf("%v is not a JSON number", f)
	}
	abs := f
	if abs < 0 {
		abs = -abs
	}
	format := byte('f')
	if abs != 0 {
		if bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	dst = strconv.AppendFloat(dst, f, format, -1, bits)
	if format == 'e' {
		// e-07 → e-7
		n := len(dst)
		if n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst, nil
}

const maxFloat = 1.7976931348623157e308

const hexDigits = "0123456789abcdef"

// plain marks the ASCII bytes a JSON string may carry as they are, under
// encoding/json's HTML-safe rules (no <, > or &).
var plain = func() (t [utf8.RuneSelf]bool) {
	for b := 0x20; b < utf8.RuneSelf; b++ {
		t[b] = b != '"' && b != '\\' && b != '<' && b != '>' && b != '&'
	}
	return t
}()

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// plainPrefix returns the length of the longest prefix of s that a JSON
// string carries unescaped. It looks at eight bytes at a time: a word
// holds a byte that needs attention when it has a byte below 0x20, a
// non-ASCII byte, or one of " \\ < > &.
func plainPrefix(s string) int {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		// One unaligned 8-byte load; i+8 <= len(s) keeps it inside s.
		w := binary.LittleEndian.Uint64(unsafe.Slice(unsafe.StringData(s[i:]), 8))
		q, bs, lt, gt, amp := w^('"'*ones), w^('\\'*ones), w^('<'*ones), w^('>'*ones), w^('&'*ones)
		if (w|(w-0x20*ones)|
			((q-ones)&^q)|((bs-ones)&^bs)|((lt-ones)&^lt)|((gt-ones)&^gt)|((amp-ones)&^amp))&highs != 0 {
			break
		}
	}
	for i < len(s) && s[i] < utf8.RuneSelf && plain[s[i]] {
		i++
	}
	return i
}

// appendString writes s as a JSON string, byte for byte as encoding/json
// does: HTML-significant characters and U+2028/U+2029 escaped, invalid
// UTF-8 replaced by U+FFFD.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	// Most strings (ids, names, hashes) need no escaping: find the first
	// byte that might, eight at a time.
	start := plainPrefix(s)
	if start == len(s) {
		dst = append(dst, s...)
		return append(dst, '"')
	}
	dst = append(dst, s[:start]...)
	for i := start; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if plain[b] {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, `\b`...)
			case '\f':
				dst = append(dst, `\f`...)
			case '\n':
				dst = append(dst, `\n`...)
			case '\r':
				dst = append(dst, `\r`...)
			case '\t':
				dst = append(dst, `\t`...)
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
