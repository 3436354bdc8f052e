package wire

import (
	"bytes"
	"encoding/json"
	"errors"
)

// Schema checks a tool's JSON Schema for use as a function's parameters:
// it must be a JSON object describing an object. An empty schema is an
// object without properties; a missing "type" is taken to be "object".
// Values are kept byte for byte.
func Schema(raw json.RawMessage) (map[string]json.RawMessage, error) {
	raw = bytes.Trim(raw, jsonSpace)
	if len(raw) == 0 || string(raw) == "null" {
		return map[string]json.RawMessage{
			"type":       json.RawMessage(`"object"`),
			"properties": json.RawMessage(`{}`),
		}, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, errors.New("its input schema is not a JSON object")
	}
	t, ok := m["type"]
	if !ok {
		m["type"] = json.RawMessage(`"object"`)
		return m, nil
	}
	var s string
	if json.Unmarshal(t, &s) != nil || s != "object" {
		return nil, errors.New(`its input schema must have "type": "object"`)
	}
	return m, nil
}
