package host

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"

	"go.yaml.in/yaml/v4"

	"github.com/agentry-dev/agentry/docs"
)

// openAPIJSON is docs/openapi.yaml, the API's contract, as JSON: converted
// once, from the copy embedded in the binary, so what is served is the
// document the tests check the API against.
var openAPIJSON = sync.OnceValues(func() ([]byte, error) { return yamlToJSON(docs.OpenAPI) })

// yamlToJSON converts a YAML document to JSON. Mapping keys must be
// strings (JSON has no other), and YAML's tags are read as the plain
// scalars they decode to.
func yamlToJSON(b []byte) ([]byte, error) {
	var v any
	if err := yaml.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("host: the OpenAPI document is not valid YAML: %w", err)
	}
	v, err := jsonable(v)
	if err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

func jsonable(v any) (any, error) {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			c, err := jsonable(e)
			if err != nil {
				return nil, err
			}
			t[k] = c
		}
		return t, nil
	case map[any]any:
		m := make(map[string]any, len(t))
		for k, e := range t {
			ks, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("host: the OpenAPI document has a mapping key that is not a string (%v); quote it", k)
			}
			c, err := jsonable(e)
			if err != nil {
				return nil, err
			}
			m[ks] = c
		}
		return m, nil
	case []any:
		for i, e := range t {
			c, err := jsonable(e)
			if err != nil {
				return nil, err
			}
			t[i] = c
		}
		return t, nil
	}
	return v, nil
}

// handleOpenAPI serves the contract. It needs no token: it says nothing
// the repository does not.
func (h *Host) handleOpenAPI(w http.ResponseWriter, _ *http.Request) {
	b, err := openAPIJSON()
	if err != nil {
		h.log.Error("host: the embedded OpenAPI document cannot be served", "err", err)
		writeError(w, newError(http.StatusInternalServerError, CodeInternal, "host: the API's document could not be converted to JSON; this build is broken"))
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "application/json")
	hd.Set("Cache-Control", "no-cache")
	_, _ = w.Write(b)
}
