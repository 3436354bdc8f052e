package host

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ListCursor is where a page of a listing ended: the last conversation
// given (listings run newest first by creation, then by id). The next
// page holds the conversations after it. Creation times and ids never
// change, so a walk page by page sees every conversation that was there
// when it began and still is, once.
type ListCursor struct {
	CreatedAt time.Time
	ID        string
}

// maxCursorLen bounds a cursor a client sends back.
const maxCursorLen = 256

// EncodeCursor is the opaque text a client sends back as ?cursor=.
func EncodeCursor(c ListCursor) string {
	return base64.RawURLEncoding.EncodeToString([]byte("c1." + strconv.FormatInt(c.CreatedAt.UnixMicro(), 10) + "." + c.ID))
}

// errBadCursor is every refusal of a cursor: the client is told to start
// over, never what was wrong inside the opaque text.
var errBadCursor = errors.New("host: the cursor is not one this host gave; start the listing again without it")

// ParseCursor reads a cursor EncodeCursor made. It refuses anything else:
// a cursor only narrows the caller's own listing, so one made by hand
// reaches nothing more, but it must be well-formed.
func ParseCursor(s string) (ListCursor, error) {
	if s == "" || len(s) > maxCursorLen {
		return ListCursor{}, errBadCursor
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return ListCursor{}, errBadCursor
	}
	rest, ok := strings.CutPrefix(string(raw), "c1.")
	if !ok {
		return ListCursor{}, errBadCursor
	}
	us, id, ok := strings.Cut(rest, ".")
	if !ok || !validSessionID(id) || us == "" || (len(us) > 1 && us[0] == '0') {
		return ListCursor{}, errBadCursor
	}
	n, err := strconv.ParseInt(us, 10, 64)
	if err != nil || n < 0 {
		return ListCursor{}, errBadCursor
	}
	return ListCursor{CreatedAt: time.UnixMicro(n).UTC(), ID: id}, nil
}

// listOptions reads a listing's query: open=true, limit (1 to MaxList,
// default MaxList) and cursor (the next of the page before). The store
// is asked for one more than the page, so the answer knows whether a
// next page exists.
func listOptions(r *http.Request) (ListOptions, *apiError) {
	q := r.URL.Query()
	opt := ListOptions{OpenOnly: q.Get("open") == "true", Limit: MaxList}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxList {
			e := newError(http.StatusBadRequest, CodeInvalidField, "host: limit must be a whole number from 1 to "+strconv.Itoa(MaxList))
			e.Field = "limit"
			return ListOptions{}, e
		}
		opt.Limit = n
	}
	if v := q.Get("cursor"); v != "" {
		c, err := ParseCursor(v)
		if err != nil {
			e := newError(http.StatusBadRequest, CodeInvalidField, err.Error())
			e.Field = "cursor"
			return ListOptions{}, e
		}
		opt.After = &c
	}
	opt.Limit++ // one more, to learn whether there is a next page
	return opt, nil
}

// pageOf cuts what the store returned to the page asked for, and gives
// the cursor of the next page ("" when this is the last).
func pageOf(cs []Conversation, opt ListOptions) ([]Conversation, string) {
	page := opt.Limit - 1
	if len(cs) <= page {
		return cs, ""
	}
	cs = cs[:page]
	last := cs[len(cs)-1]
	return cs, EncodeCursor(ListCursor{CreatedAt: last.CreatedAt, ID: last.ID})
}

// listAnswer adds next to a listing's answer when there is a next page.
func listAnswer(body map[string]any, next string) map[string]any {
	if next != "" {
		body["next"] = next
	}
	return body
}
