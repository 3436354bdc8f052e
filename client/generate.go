package client

// client.gen.go is generated from docs/openapi.yaml, the API's one source
// of truth, by the oapi-codegen pinned here (TestGeneratedClientIsCurrent
// checks the committed file is what it generates). After changing the
// document: go generate ./client
//
// The generator applies overlay.yaml first: every error status an
// operation documents becomes one default response, so a call's answer has
// its success bodies (JSON200, JSON201, …) and JSONDefault, an *Error for
// any other status, whose code says what went wrong.
//
//go:generate go run github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen@v2.8.2 -config oapi-codegen.yaml -o client.gen.go ../docs/openapi.yaml

import (
	"context"
	"net/http"
)

// BearerToken sends token as the bearer credential of every request: an
// option for NewClient or NewClientWithResponses, or, through its
// RequestEditorFn, for one call.
func BearerToken(token string) RequestEditorFn {
	return func(_ context.Context, req *http.Request) error {
		req.Header.Set("Authorization", "Bearer "+token)
		return nil
	}
}
