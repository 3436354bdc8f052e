// Package e2e holds the end-to-end tests of the model adapters: the agent
// loop with llm/anthropic and llm/openai, each talking to a local server
// that speaks its vendor's wire format (internal/modelwire), completing a
// two-step tool-calling turn with the real run_code tool over a local
// runner. It has no code of its own.
package e2e
