// Package jsonerr names what encoding/json found wrong with a document in
// words a person can act on, without quoting the document (it may hold a
// secret).
package jsonerr

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Describe says what is wrong with the JSON a decoder refused with err.
// unknown is what to say of a field the target does not define (the
// decoder having DisallowUnknownFields).
func Describe(err error, unknown string) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("it is not valid JSON (at byte %d)", se.Offset)
	case errors.As(err, &te):
		if te.Field == "" {
			return "it is not a JSON object"
		}
		return fmt.Sprintf("field %q has the wrong JSON type", te.Field)
	case strings.HasPrefix(err.Error(), "json: unknown field"):
		return unknown
	case strings.Contains(err.Error(), "duration"):
		return `a duration is a string such as "30s"`
	}
	return "it is not valid JSON"
}
