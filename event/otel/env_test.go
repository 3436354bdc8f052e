package otel_test

import (
	"compress/gzip"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	colmetric "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/agentry-dev/agentry/event"
	"github.com/agentry-dev/agentry/event/otel"
	"github.com/agentry-dev/agentry/tool"
)

// collector is a local OTLP/HTTP receiver: the real wire format, decoded
// with the protocol's own generated types.
type collector struct {
	mu      sync.Mutex
	spans   []string
	service string
	metrics []string
	headers http.Header
}

func (c *collector) handler(t *testing.T) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			body = zr
		}
		data, err := io.ReadAll(body)
		if err != nil || r.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "bad request", 400)
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		c.headers = r.Header.Clone()
		switch r.URL.Path {
		case "/v1/traces":
			var req coltrace.ExportTraceServiceRequest
			if err := proto.Unmarshal(data, &req); err != nil {
				t.Errorf("traces: %v", err)
			}
			for _, rs := range req.ResourceSpans {
				for _, kv := range rs.Resource.Attributes {
					if kv.Key == "service.name" {
						c.service = kv.Value.GetStringValue()
					}
				}
				for _, ss := range rs.ScopeSpans {
					for _, s := range ss.Spans {
						c.spans = append(c.spans, s.Name)
					}
				}
			}
			out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
			w.Header().Set("Content-Type", "application/x-protobuf")
			_, _ = w.Write(out)
		case "/v1/metrics":
			var req colmetric.ExportMetricsServiceRequest
			if err := proto.Unmarshal(data, &req); err != nil {
				t.Errorf("metrics: %v", err)
			}
			for _, rm := range req.ResourceMetrics {
				for _, sm := range rm.ScopeMetrics {
					for _, m := range sm.Metrics {
						c.metrics = append(c.metrics, m.Name)
					}
				}
			}
			out, _ := proto.Marshal(&colmetric.ExportMetricsServiceResponse{})
			w.Header().Set("Content-Type", "application/x-protobuf")
			_, _ = w.Write(out)
		default:
			http.NotFound(w, r)
		}
	})
}

func TestNewFromEnvExportsOverOTLPHTTP(t *testing.T) {
	c := &collector{}
	srv := httptest.NewServer(c.handler(t))
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-team=agents")
	t.Setenv("OTEL_SERVICE_NAME", "agentry-test")
	t.Setenv("OTEL_METRIC_EXPORT_INTERVAL", "3600000") // only Close exports

	s, err := otel.NewFromEnv(context.Background(), otel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	for i, e := range []event.Event{
		{Type: event.TypeTurnStart, Payload: &event.TurnStart{}},
		{Type: tool.TypeSessionStarted, Payload: &tool.SessionOpened{Tool: "run_code", Scope: "run", KeyHash: "k"}},
		{Type: tool.TypeCallStart, Payload: &tool.CallStart{Tool: "run_code", ToolCallID: "c1", Iteration: 1}},
		{Type: tool.TypeCallEnd, Payload: &tool.CallEnd{Tool: "run_code", ToolCallID: "c1", DurationMs: 5}},
		{Type: event.TypeTurnEnd, Payload: &event.TurnEnd{Outcome: "answer"}},
	} {
		e.Meta = event.Meta{RunID: "r1", Time: at.Add(time.Duration(i) * time.Millisecond)}
		s.Export(e)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	want := map[string]bool{"invoke_agent": false, "agentry.iteration 1": false, "execute_tool run_code": false}
	for _, n := range c.spans {
		if _, ok := want[n]; ok {
			want[n] = true
		}
	}
	for n, seen := range want {
		if !seen {
			t.Errorf("the collector did not receive span %q (got %v)", n, c.spans)
		}
	}
	if c.service != "agentry-test" {
		t.Errorf("service.name %q", c.service)
	}
	if c.headers.Get("X-Team") != "agents" {
		t.Errorf("OTEL_EXPORTER_OTLP_HEADERS not applied: %v", c.headers)
	}
	found := false
	for _, m := range c.metrics {
		found = found || m == "agentry.tool_sessions.opened"
	}
	if !found {
		t.Errorf("metrics received: %v", c.metrics)
	}
}

func TestNewFromEnvRefusesWhatItCannotSpeak(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	if _, err := otel.NewFromEnv(context.Background(), otel.Options{}); !errors.Is(err, otel.ErrProtocol) {
		t.Fatalf("grpc: %v", err)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "")
	t.Setenv("OTEL_TRACES_EXPORTER", "zipkin")
	if _, err := otel.NewFromEnv(context.Background(), otel.Options{}); err == nil {
		t.Fatal("zipkin accepted")
	}
	// none turns both signals off: nothing to dial, nothing to leak.
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	t.Setenv("OTEL_METRICS_EXPORTER", "none")
	s, err := otel.NewFromEnv(context.Background(), otel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Export(event.Event{Type: event.TypeTurnStart, Payload: &event.TurnStart{}, Meta: event.Meta{RunID: "r"}})
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}
