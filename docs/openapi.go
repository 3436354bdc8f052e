package docs

import _ "embed"

// OpenAPI is docs/openapi.yaml: the HTTP API's contract, an OpenAPI 3.1
// document. The host serves it as JSON at /v1/openapi.json, its test suite
// checks every request and response against it, and package client is
// generated from it.
//
//go:embed openapi.yaml
var OpenAPI []byte
