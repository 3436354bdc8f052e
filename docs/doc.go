// Package docs holds agentry's documentation. Its one export is the HTTP
// API's contract, docs/openapi.yaml, embedded for the host to serve; its
// tests run the shell examples the pages mark as runnable offline, so they
// stay true.
package docs
