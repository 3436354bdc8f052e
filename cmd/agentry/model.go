package main

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"unicode"

	"github.com/agentry-dev/agentry/llm"
	"github.com/agentry-dev/agentry/llm/anthropic"
	"github.com/agentry-dev/agentry/llm/openai"
)

// defaultModel is the --model of `agentry run` when none is given.
const defaultModel = "scripted"

// ollamaDefault is where a local Ollama serves its OpenAI-compatible API.
const ollamaDefault = "http://localhost:11434/v1"

// modelHelp is the part of `agentry run --help` about --model.
const modelHelp = `Choosing a model (--model):
  scripted          the offline default: a scripted calculator that runs the
                    code in your message with run_code; not a language model
  anthropic:MODEL   Anthropic's API, e.g. anthropic:claude-sonnet-4-5
  openai:MODEL      OpenAI's API, or any OpenAI-compatible server (vLLM,
                    llama.cpp's llama-server, LM Studio) at OPENAI_BASE_URL
  ollama:MODEL      a local Ollama, e.g. ollama:llama3.2

Environment:
  ANTHROPIC_API_KEY   key for anthropic:MODEL (required)
  ANTHROPIC_BASE_URL  another endpoint for anthropic:MODEL (a proxy, a gateway)
  OPENAI_API_KEY      key for openai:MODEL (required for OpenAI's own API;
                      local servers usually need none)
  OPENAI_BASE_URL     the API root of an OpenAI-compatible server, e.g.
                      http://localhost:8000/v1 (vLLM), http://localhost:8080/v1
                      (llama-server)
  OLLAMA_HOST         where Ollama listens (host:port or URL); default
                      localhost:11434. Ollama is never sent OPENAI_API_KEY.`

// parseModel reads the --model grammar, taking the keys and endpoints
// from env (os.Getenv in the command; a map in tests).
//
// "scripted" returns a nil model and a nil error: the caller then uses the
// offline scripted calculator (llm/scripted), which this file does not
// build. Every other valid spec returns a model that has sent nothing yet.
// A malformed spec, a missing key or a bad endpoint is a usage error (exit
// 2) whose text says the fix; a key never appears in it.
func parseModel(spec string, env func(string) string) (llm.Model, error) {
	if spec == defaultModel {
		return nil, nil
	}
	provider, name, ok := strings.Cut(spec, ":")
	provider = strings.ToLower(strings.TrimSpace(provider))
	if spec == "" || !ok {
		return nil, usageError("--model %q: use scripted, anthropic:MODEL, openai:MODEL or ollama:MODEL", printable(spec))
	}
	if name == "" {
		return nil, usageError("--model %q names no model: write %s:MODEL", printable(spec), printable(provider))
	}
	if i := strings.IndexFunc(name, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }); i >= 0 {
		return nil, usageError("--model %q: a model name has no spaces or control characters", printable(spec))
	}
	var (
		m   llm.Model
		err error
	)
	switch provider {
	case "anthropic":
		m, err = anthropic.New(anthropic.Options{
			Model:   name,
			APIKey:  env("ANTHROPIC_API_KEY"),
			BaseURL: env("ANTHROPIC_BASE_URL"),
		})
	case "openai":
		m, err = openai.New(openai.Options{
			Model:   name,
			APIKey:  env("OPENAI_API_KEY"),
			BaseURL: env("OPENAI_BASE_URL"),
		})
	case "ollama":
		base, berr := ollamaBaseURL(env("OLLAMA_HOST"))
		if berr != nil {
			return nil, usageError("%w", berr)
		}
		// No key: an OpenAI key must not travel to another server.
		m, err = openai.New(openai.Options{Model: name, BaseURL: base, Provider: "ollama"})
	case "scripted":
		return nil, usageError("--model scripted takes no model name")
	default:
		return nil, usageError("--model %q: unknown provider %q; use anthropic, openai or ollama", printable(spec), printable(provider))
	}
	if err != nil {
		return nil, usageError("%w", err)
	}
	return m, nil
}

// ollamaBaseURL turns OLLAMA_HOST into the root of Ollama's
// OpenAI-compatible API, reading it as Ollama does: "host", "host:port" or
// a URL; the port defaults to 11434 without a scheme, and to 80 or 443
// with one; an empty host is this machine.
func ollamaBaseURL(host string) (string, error) {
	host = strings.TrimSpace(host)
	if host == "" {
		return ollamaDefault, nil
	}
	bad := fmt.Errorf("OLLAMA_HOST=%q is not a host, host:port or http(s) URL", printable(host))
	raw, port := host, "11434"
	if scheme, _, ok := strings.Cut(host, "://"); ok {
		port = map[string]string{"http": "80", "https": "443"}[strings.ToLower(scheme)]
	} else {
		raw = "http://" + host
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Opaque != "" || u.User != nil ||
		u.RawQuery != "" || u.Fragment != "" || strings.ContainsAny(u.Host, " \t") {
		return "", bad
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "", bad
		}
		port = p
	}
	hostname := u.Hostname()
	switch hostname {
	case "", "0.0.0.0", "::": // where Ollama listens, not where to call it
		hostname = "localhost"
	}
	u.Host = net.JoinHostPort(hostname, port)
	u.Path = strings.TrimSuffix(strings.TrimRight(u.Path, "/"), "/v1") + "/v1"
	u.RawPath = ""
	return u.String(), nil
}

// printable shortens user input for a message; %q escapes the rest.
func printable(s string) string {
	const max = 80
	if r := []rune(s); len(r) > max {
		return string(r[:max]) + "…"
	}
	return s
}
