module github.com/agentry-dev/agentry

go 1.26.8

require go.uber.org/goleak v1.3.0

require (
	github.com/google/jsonschema-go v0.4.3
	github.com/spf13/cobra v1.10.2
)

require (
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
)
