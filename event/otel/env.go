package otel

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
)

// ErrProtocol is returned by NewFromEnv for an OTLP protocol it does not
// speak.
var ErrProtocol = errors.New("otel: unsupported OTLP protocol")

// NewFromEnv builds OTLP/HTTP exporters from the standard environment
// variables and returns a sink that owns them (Close shuts them down):
//
//   - OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
//     OTEL_EXPORTER_OTLP_METRICS_ENDPOINT, _HEADERS, _TIMEOUT,
//     _COMPRESSION, _CERTIFICATE and their per-signal forms, read by the
//     official exporters themselves;
//   - OTEL_EXPORTER_OTLP_PROTOCOL (and _TRACES_/_METRICS_PROTOCOL):
//     http/protobuf, the default; any other value is refused by name;
//   - OTEL_TRACES_EXPORTER / OTEL_METRICS_EXPORTER: otlp (default) or none;
//   - OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES (service.name
//     defaults to "agentry"); OTEL_BSP_* and OTEL_METRIC_EXPORT_INTERVAL
//     tune the SDK's batching.
//
// opt's providers are ignored; its other fields apply.
func NewFromEnv(ctx context.Context, opt Options) (*Sink, error) {
	res, err := resource.Merge(resource.NewSchemaless(semconv.ServiceName("agentry")), resource.Environment())
	if err != nil {
		return nil, fmt.Errorf("otel: reading OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	var owned []shutdowner
	fail := func(err error) (*Sink, error) {
		for _, p := range owned {
			_ = p.Shutdown(ctx)
		}
		return nil, err
	}
	opt.TracerProvider, opt.MeterProvider = nil, nil

	traces, err := wanted("TRACES")
	if err != nil {
		return fail(err)
	}
	if traces {
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return fail(fmt.Errorf("otel: building the OTLP trace exporter: %w", err))
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
		owned = append(owned, tp)
		opt.TracerProvider = tp
	}
	metrics, err := wanted("METRICS")
	if err != nil {
		return fail(err)
	}
	if metrics {
		exp, err := otlpmetrichttp.New(ctx)
		if err != nil {
			return fail(fmt.Errorf("otel: building the OTLP metric exporter: %w", err))
		}
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp)), sdkmetric.WithResource(res))
		owned = append(owned, mp)
		opt.MeterProvider = mp
	}
	s, err := New(opt)
	if err != nil {
		return fail(err)
	}
	s.owned = owned
	return s, nil
}

// wanted reads OTEL_<SIGNAL>_EXPORTER and the protocol for one signal.
func wanted(signal string) (bool, error) {
	switch exp := strings.TrimSpace(os.Getenv("OTEL_" + signal + "_EXPORTER")); exp {
	case "", "otlp":
	case "none":
		return false, nil
	default:
		return false, fmt.Errorf("otel: OTEL_%s_EXPORTER=%q: this sink exports otlp or none", signal, exp)
	}
	proto := strings.TrimSpace(os.Getenv("OTEL_EXPORTER_OTLP_" + signal + "_PROTOCOL"))
	if proto == "" {
		proto = strings.TrimSpace(os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))
	}
	switch proto {
	case "", "http/protobuf":
		return true, nil
	}
	return false, fmt.Errorf("%w %q for %s: set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf and point the endpoint at the collector's OTLP/HTTP port (4318 by default)",
		ErrProtocol, proto, strings.ToLower(signal))
}
